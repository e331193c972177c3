// text/tool_calls.h — tool calls in generated text, in the format the model's chat template
// teaches it. qwen3 (Hermes style): <tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>
// anywhere in the text. llama3 (Llama 3.1–3.3 JSON tool calling): the whole reply is one or more
// {"name": "...", "parameters": {...}} objects separated by ';', optionally after <|python_tag|>.
// Streaming: text that may still become a call is held back; a call is reported once complete.
// Text that turns out not to be a call (broken JSON, no "name") is passed through unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rill::text {

struct ToolCall {
  std::string name;
  std::string arguments;  ///< JSON text of the arguments object (OpenAI's shape)
};

enum class ToolFormat { none, qwen3, llama3 };

/// "qwen3" (alias "hermes"), "llama3" or "none"; throws rill::Error naming `flag` otherwise.
ToolFormat tool_format_from_name(std::string_view name, const char* flag);
const char* tool_format_name(ToolFormat format);
/// The format a chat template teaches: <tool_call> → qwen3; <|python_tag|>, or Llama-style headers
/// with a "parameters" object → llama3; otherwise qwen3 (the common default of open models).
ToolFormat detect_tool_format(std::string_view template_source);

/// The start of a call to `name` (empty: any tool; the model writes the name) in `format`. A prompt
/// that ends with it makes the model write a call without a grammar (tool_choice required / any /
/// a named tool); the parser is fed the same text first.
std::string forced_call_opening(ToolFormat format, const std::string& name);

class ToolCallParser {
 public:
  struct Output {
    std::string content;           ///< plain text now safe to emit
    std::vector<ToolCall> calls;   ///< calls completed by this chunk
  };
  explicit ToolCallParser(ToolFormat format = ToolFormat::qwen3) : format_(format) {}
  Output push(std::string_view text);
  /// End of generation: held text (an unterminated call is returned as plain text).
  Output flush();
  int32_t calls_seen() const { return calls_; }
  ToolFormat format() const { return format_; }

 private:
  Output push_tagged();
  Output push_llama3();

  ToolFormat format_;
  std::string held_;
  bool inside_ = false;   // qwen3: after <tool_call>
  // llama3: start (leading space and tags), calls (reading {...};{...}), text (a plain reply)
  enum class Llama3State { start, calls, text } llama3_ = Llama3State::start;
  int32_t calls_ = 0;
};

}  // namespace rill::text
