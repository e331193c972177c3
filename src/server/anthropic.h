// server/anthropic.h — the Anthropic Messages API: /v1/messages bodies (system, content blocks,
// stop_sequences, tools and tool_choice, tool_use and tool_result blocks) parsed into an engine
// request, and the job that writes the message JSON (text and tool_use content blocks) or the
// streaming event grammar message_start → ping → per block (content_block_start →
// content_block_delta* (text_delta or input_json_delta) → content_block_stop) → message_delta →
// message_stop. Without tools the text block opens before the ping, as Anthropic's stream does.
#pragma once

#include <string>
#include <vector>

#include "server/generation.h"
#include "server/http_server.h"
#include "server/openai_request.h"
#include "text/reasoning.h"
#include "text/tool_calls.h"

namespace rill::server {

/// Parses a /v1/messages (or, with count_only, /v1/messages/count_tokens) body. Reuses
/// OpenAIRequest for the engine request and the text options.
OpenAIRequest parse_messages_request(const ojson& body, const ModelInfo& model, bool count_only = false);

/// {"type":"error","error":{"type","message"}}.
HttpReply anthropic_error(int status, const std::string& message);

class AnthropicJob : public StreamJob {
 public:
  AnthropicJob(EngineApi& engine, const text::Tokenizer& tokenizer, OpenAIRequest request, RequestHandle handle,
               std::string id, ServerMetrics* metrics = nullptr);
  bool poll(std::string& out) override;
  void cancel() override { gen_.cancel(); }
  int status() const override { return status_; }

 private:
  ojson message_shell() const;
  std::string stop_reason() const;
  void open_block(ojson block, std::string& out);
  void close_block(std::string& out);  ///< ends the open text or thinking block, if any (tool_use blocks close as they open)
  void add_thinking(const std::string& text, std::string& out);
  void add_text(const std::string& text, std::string& out);
  void add_tool_use(const text::ToolCall& call, std::string& out);

  OpenAIRequest req_;
  Generation gen_;
  text::ToolCallParser parser_;
  text::ReasoningSplitter splitter_;  // used when req_.split_reasoning
  std::string id_, finish_, stop_sequence_;
  std::string pending_;  // white space held back while tools are parsed
  std::vector<ojson> blocks_;
  bool text_open_ = false;      // the last block is a text block still receiving deltas
  bool thinking_open_ = false;  // the last block is a thinking block still receiving deltas
  int32_t tool_uses_ = 0;
  bool started_ = false;
  int status_ = 200;
};

}  // namespace rill::server
