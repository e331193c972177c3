// server/anthropic.h — the Anthropic Messages API: /v1/messages bodies (system, content blocks,
// stop_sequences) parsed into an engine request, and the job that writes the message JSON or the
// streaming event grammar message_start → content_block_start → ping → content_block_delta* →
// content_block_stop → message_delta → message_stop.
#pragma once

#include <string>

#include "server/generation.h"
#include "server/http_server.h"
#include "server/openai_request.h"

namespace rill::server {

/// Parses a /v1/messages (or, with count_only, /v1/messages/count_tokens) body. Reuses
/// OpenAIRequest for the engine request and the text options.
OpenAIRequest parse_messages_request(const ojson& body, const ModelInfo& model, bool count_only = false);

/// {"type":"error","error":{"type","message"}}.
HttpReply anthropic_error(int status, const std::string& message);

class AnthropicJob : public StreamJob {
 public:
  AnthropicJob(Engine& engine, const text::Tokenizer& tokenizer, OpenAIRequest request, RequestHandle handle,
               std::string id, ServerMetrics* metrics = nullptr);
  bool poll(std::string& out) override;
  void cancel() override { gen_.cancel(); }
  int status() const override { return status_; }

 private:
  ojson message_shell() const;
  std::string stop_reason() const;

  OpenAIRequest req_;
  Generation gen_;
  std::string id_, text_, finish_, stop_sequence_;
  bool started_ = false;
  int status_ = 200;
};

}  // namespace rill::server
