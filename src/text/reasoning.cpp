// text/reasoning.cpp — the <think> … </think> split.
#include "text/reasoning.h"

#include <algorithm>

namespace rill::text {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

size_t partial_tag(const std::string& s, std::string_view tag) {
  for (size_t len = std::min(tag.size() - 1, s.size()); len > 0; --len)
    if (s.compare(s.size() - len, len, tag.substr(0, len)) == 0) return len;
  return 0;
}

}  // namespace

ReasoningSplitter::Output ReasoningSplitter::push(std::string_view text) {
  Output out;
  if (answering_) {
    out.content = answer(text);
    return out;
  }
  held_.append(text);
  if (at_start_) {
    size_t lead = held_.find_first_not_of(" \t\r\n");
    if (lead == std::string::npos) return out;
    std::string_view rest = std::string_view(held_).substr(lead);
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return out;  // maybe "<think>"
    if (rest.substr(0, kOpen.size()) == kOpen) held_.erase(0, lead + kOpen.size());
    at_start_ = false;
  }
  size_t end = held_.find(kClose);
  if (end != std::string::npos) {
    out.reasoning = held_.substr(0, end);
    std::string after = held_.substr(end + kClose.size());
    held_.clear();
    answering_ = trim_ = true;
    out.content = answer(after);
    return out;
  }
  size_t keep = partial_tag(held_, kClose);
  out.reasoning = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string ReasoningSplitter::answer(std::string_view text) {
  if (trim_) {
    size_t start = text.find_first_not_of("\r\n");
    if (start == std::string_view::npos) return "";
    text.remove_prefix(start);
    trim_ = false;
  }
  return std::string(text);
}

ReasoningSplitter::Output ReasoningSplitter::flush() {
  Output out;
  out.reasoning = std::move(held_);  // the model never closed its reasoning
  held_.clear();
  return out;
}

}  // namespace rill::text
