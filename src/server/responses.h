// server/responses.h — the OpenAI Responses API (/v1/responses): input items (messages, text
// parts, function_call and function_call_output), instructions, function tools; the response
// object, or the streaming event sequence response.created → response.in_progress →
// output_item.added → content_part.added → output_text.delta* → output_text.done →
// content_part.done → output_item.done (+ function_call items) → response.completed.
#pragma once

#include <string>
#include <vector>

#include "server/generation.h"
#include "server/http_server.h"
#include "server/openai_request.h"
#include "text/tool_calls.h"

namespace rill::server {

/// Translates a Responses body into a chat request (same validation and template path).
OpenAIRequest parse_responses_request(const ojson& body, const ModelInfo& model);

class ResponsesJob : public StreamJob {
 public:
  ResponsesJob(EngineApi& engine, const text::Tokenizer& tokenizer, OpenAIRequest request, RequestHandle handle,
               std::string id, int64_t created, ServerMetrics* metrics = nullptr);
  bool poll(std::string& out) override;
  void cancel() override { gen_.cancel(); }
  int status() const override { return status_; }

 private:
  ojson response(const std::string& status) const;
  ojson message_item(const std::string& status) const;
  std::string event(const char* type, ojson payload);

  OpenAIRequest req_;
  Generation gen_;
  text::ToolCallParser parser_;
  std::string id_, text_, finish_;
  int64_t created_;
  std::vector<ojson> calls_;
  bool started_ = false;
  int64_t sequence_ = 0;
  int status_ = 200;
};

}  // namespace rill::server
