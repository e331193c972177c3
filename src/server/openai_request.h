// server/openai_request.h — parsing and validation of OpenAI /v1/chat/completions and
// /v1/completions bodies into an engine Request plus the text-side options (stop strings,
// streaming, logprobs). Every rejection is a 400 ApiError naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/json_fields.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace rill::server {

/// What the parsers need to know about the served model.
struct ModelInfo {
  std::string id;  ///< the name /v1/models lists
  const text::Tokenizer* tokenizer = nullptr;
  const text::ChatTemplate* chat_template = nullptr;
  std::vector<int32_t> stop_ids;  ///< EOS ids: end a sequence
  int32_t max_model_len = 0;
  int64_t vocab_size = 0;
  int32_t max_n = 64;
  bool reasoning = false;  ///< a thinking model: split <think> output into reasoning_content
  text::ToolFormat tool_format = text::ToolFormat::qwen3;  ///< how generated tool calls look (from the template)
};

struct OpenAIRequest {
  bool chat = true;
  std::string model;
  Request request;  ///< prompt, sampling, stop ids, max_tokens
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool echo = false;          ///< completions: the prompt text precedes the output
  /// completions: `max_tokens` 0 with `echo` — the prompt alone is returned (scored when `logprobs`
  /// is given); the engine draws one token that the answer leaves out.
  bool score_only = false;
  bool parse_tools = false;   ///< chat with tools: calls in the output (tool_format) become tool_calls
  text::ToolFormat tool_format = text::ToolFormat::qwen3;
  /// Text the prompt ends with that the model's reply continues (a forced tool call's opening): the
  /// tool-call parser sees it before the generated text.
  std::string forced_prefix;
  bool split_reasoning = false;  ///< chat: text before </think> goes to reasoning_content
  /// Anthropic thinking.budget_tokens (0: none): with split_reasoning, thinking is closed after this
  /// many tokens (Generation::set_thinking_budget).
  int32_t thinking_budget = 0;
  std::string prompt_text;    ///< completions: the prompt as text (for echo)
  /// completions with a list of prompts: the prompts after the first (`request` holds the first) and
  /// their texts. Each is an engine request with `request`'s controls; prompt k's choices are numbered
  /// k · n + i.
  std::vector<std::vector<int32_t>> more_prompts;
  std::vector<std::string> more_prompt_texts;
};

OpenAIRequest parse_chat_request(const ojson& body, const ModelInfo& model);
/// The optional top-level `session_id` (an extension on every generation endpoint): a conversation
/// id whose last prompt boundary the engine keeps pinned in the prefix cache. Empty when absent or
/// null; a 400 naming `session_id` when it is not a string or is longer than 256 bytes.
std::string parse_session_id(const ojson& body);
/// Most prompts one /v1/completions request may list.
constexpr int32_t kMaxPrompts = 256;
OpenAIRequest parse_completion_request(const ojson& body, const ModelInfo& model);

/// The chat messages normalized for the template: content parts joined to a string; roles checked.
ojson normalize_messages(const ojson& messages);

}  // namespace rill::server
