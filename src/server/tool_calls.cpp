// server/tool_calls.cpp — the <tool_call> block scanner.
#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

namespace rill::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(const std::string& s, std::string_view tag) {
  for (size_t len = std::min(tag.size() - 1, s.size()); len > 0; --len)
    if (s.compare(s.size() - len, len, tag.substr(0, len)) == 0) return len;
  return 0;
}

bool parse_call(std::string_view body, ToolCall& call) {
  try {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(body);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    call.name = j["name"].get<std::string>();
    const char* key = j.contains("arguments") ? "arguments" : "parameters";
    if (!j.contains(key) || j[key].is_null()) call.arguments = "{}";
    else if (j[key].is_string()) call.arguments = j[key].get<std::string>();
    else call.arguments = j[key].dump();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

ToolCallParser::Output ToolCallParser::push(std::string_view text) {
  Output out;
  held_.append(text);
  while (true) {
    if (!inside_) {
      size_t at = held_.find(kOpen);
      if (at == std::string::npos) {
        size_t keep = partial_tag(held_, kOpen);
        out.content += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      out.content += held_.substr(0, at);
      held_.erase(0, at);
      inside_ = true;
    }
    size_t end = held_.find(kClose);
    if (end == std::string::npos) return out;
    const std::string block = held_.substr(0, end + kClose.size());
    ToolCall call;
    if (parse_call(std::string_view(block).substr(kOpen.size(), end - kOpen.size()), call)) {
      out.calls.push_back(std::move(call));
      ++calls_;
    } else {
      out.content += block;
    }
    held_.erase(0, block.size());
    inside_ = false;
  }
}

ToolCallParser::Output ToolCallParser::flush() {
  Output out;
  out.content = std::move(held_);
  held_.clear();
  inside_ = false;
  return out;
}

}  // namespace rill::server
