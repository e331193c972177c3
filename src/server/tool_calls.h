// server/tool_calls.h — tool calls in generated text, Qwen3/Hermes style:
// <tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>. Streaming: text that may open a
// tool call is held back; a call is reported once its closing tag arrives. A block whose JSON does
// not parse is passed through as plain text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rill::server {

struct ToolCall {
  std::string name;
  std::string arguments;  ///< JSON text of the arguments object (OpenAI's shape)
};

class ToolCallParser {
 public:
  struct Output {
    std::string content;           ///< plain text now safe to emit
    std::vector<ToolCall> calls;   ///< calls completed by this chunk
  };
  Output push(std::string_view text);
  /// End of generation: held text (an unterminated call is returned as plain text).
  Output flush();
  int32_t calls_seen() const { return calls_; }

 private:
  std::string held_;
  bool inside_ = false;
  int32_t calls_ = 0;
};

}  // namespace rill::server
