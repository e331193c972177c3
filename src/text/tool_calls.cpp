// text/tool_calls.cpp — the <tool_call> block scanner and the Llama 3 JSON call scanner.
#include "text/tool_calls.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rill::text {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(const std::string& s, std::string_view tag) {
  for (size_t len = std::min(tag.size() - 1, s.size()); len > 0; --len)
    if (s.compare(s.size() - len, len, tag.substr(0, len)) == 0) return len;
  return 0;
}

/// `require_arguments`: the object must also hold "arguments" or "parameters" (Llama 3 replies
/// may be plain JSON answers that happen to have a "name").
bool parse_call(std::string_view body, ToolCall& call, bool require_arguments) {
  try {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(body);
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    call.name = j["name"].get<std::string>();
    const char* key = j.contains("arguments") ? "arguments" : "parameters";
    if (require_arguments && !j.contains(key)) return false;
    if (!j.contains(key) || j[key].is_null()) call.arguments = "{}";
    else if (j[key].is_string()) call.arguments = j[key].get<std::string>();
    else call.arguments = j[key].dump();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

/// End (one past the closing brace) of the JSON object that opens at s[from] == '{', or npos
/// while it is incomplete. Braces inside strings do not count.
size_t object_end(const std::string& s, size_t from) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string::npos;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

ToolFormat tool_format_from_name(std::string_view name, const char* flag) {
  if (name == "qwen3" || name == "hermes") return ToolFormat::qwen3;
  if (name == "llama3" || name == "llama3_json") return ToolFormat::llama3;
  if (name == "none") return ToolFormat::none;
  fail("{}: '{}' is not a known tool-call format (qwen3, llama3, none)", flag, name);
}

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::none: return "none";
    case ToolFormat::qwen3: return "qwen3";
    case ToolFormat::llama3: return "llama3";
  }
  return "?";
}

ToolFormat detect_tool_format(std::string_view source) {
  if (source.find(kOpen) != std::string_view::npos) return ToolFormat::qwen3;
  if (source.find(kPythonTag) != std::string_view::npos) return ToolFormat::llama3;
  if (source.find("<|start_header_id|>") != std::string_view::npos && source.find("\"parameters\"") != std::string_view::npos)
    return ToolFormat::llama3;
  return ToolFormat::qwen3;
}

std::string forced_call_opening(ToolFormat format, const std::string& name) {
  RILL_CHECK(format != ToolFormat::none);
  std::string open = "{\"name\": \"";
  if (!name.empty())
    open = "{\"name\": " + nlohmann::json(name).dump() + (format == ToolFormat::llama3 ? ", \"parameters\": " : ", \"arguments\": ");
  return format == ToolFormat::llama3 ? open : std::string(kOpen) + "\n" + open;
}

ToolCallParser::Output ToolCallParser::push(std::string_view text) {
  if (format_ == ToolFormat::none) return Output{std::string(text), {}};
  held_.append(text);
  return format_ == ToolFormat::llama3 ? push_llama3() : push_tagged();
}

ToolCallParser::Output ToolCallParser::push_tagged() {
  Output out;
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
    if (parse_call(std::string_view(block).substr(kOpen.size(), end - kOpen.size()), call, false)) {
      out.calls.push_back(std::move(call));
      ++calls_;
    } else {
      out.content += block;
    }
    held_.erase(0, block.size());
    inside_ = false;
  }
}

// Held text always starts where the reply (start) or the text after the last call (calls) starts,
// so a reply that is not a call comes back byte for byte.
ToolCallParser::Output ToolCallParser::push_llama3() {
  Output out;
  while (llama3_ != Llama3State::text) {
    size_t pos = 0;
    for (bool skipped = true; skipped;) {
      skipped = false;
      while (pos < held_.size() && (is_space(held_[pos]) || (llama3_ == Llama3State::calls && held_[pos] == ';'))) {
        ++pos;
        skipped = true;
      }
      if (held_.compare(pos, kPythonTag.size(), kPythonTag) == 0) {
        pos += kPythonTag.size();
        skipped = true;
      }
    }
    if (pos == held_.size()) return out;  // only space, separators and tags so far
    const std::string_view rest = std::string_view(held_).substr(pos);
    if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest) return out;
    if (held_[pos] != '{') break;
    const size_t end = object_end(held_, pos);
    if (end == std::string::npos) return out;
    ToolCall call;
    if (!parse_call(std::string_view(held_).substr(pos, end - pos), call, true)) break;
    out.calls.push_back(std::move(call));
    ++calls_;
    held_.erase(0, end);
    llama3_ = Llama3State::calls;
  }
  llama3_ = Llama3State::text;
  out.content += held_;
  held_.clear();
  return out;
}

ToolCallParser::Output ToolCallParser::flush() {
  Output out;
  const bool only_separators = held_.find_first_not_of(" \t\r\n;") == std::string::npos;
  if (!(format_ == ToolFormat::llama3 && llama3_ == Llama3State::calls && only_separators))
    out.content = std::move(held_);
  held_.clear();
  inside_ = false;
  return out;
}

}  // namespace rill::text
