// server/service.h — the HTTP API of one served model: routes requests to the endpoints
// (/health, /metrics, /v1/models, /tokenize, /detokenize, /v1/chat/completions, /v1/completions,
// /v1/responses, /v1/messages, /v1/messages/count_tokens), checks the API key, and turns every failure into an
// OpenAI-style (Anthropic-style on /v1/messages) error body with the right status. Once drain()
// was called (SIGTERM), work is refused with 503 while running requests finish.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "server/engine_api.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace rill::server {

struct ServiceOptions {
  std::string model_id = "rill";
  std::string api_key;  ///< empty: no key required
  bool reasoning = false;  ///< split <think> … </think> into reasoning_content (chat)
  std::string tool_parser;  ///< "qwen3", "llama3" or "none"; empty: picked from the chat template
};

class Service {
 public:
  /// Borrows the engine; tokenizer may be absent (token-id prompts only), template may be empty.
  Service(EngineApi& engine, std::optional<text::Tokenizer> tokenizer, text::ChatTemplate chat_template,
          std::vector<int32_t> stop_ids, ServiceOptions options);

  HandlerResult handle(const HttpRequest& request);
  /// Stop taking work: generating endpoints answer 503 and /health reports "draining" (503).
  void drain() { draining_ = true; }
  text::ToolFormat tool_format() const { return info_.tool_format; }
  /// {"error": {"message", "type", "param", "code"}} with `status`.
  static HttpReply error_reply(int status, const std::string& message, const std::string& param = "",
                               const std::string& type = "");
  /// The error body of the API `target` belongs to (Anthropic's shape on /v1/messages, else OpenAI's).
  static HttpReply error_reply_for(const std::string& target, int status, const std::string& message);

 private:
  HandlerResult route(const HttpRequest& request);
  HandlerResult generate(const HttpRequest& request, bool chat);
  HandlerResult messages(const HttpRequest& request);
  /// engine.submit with refusals mapped to 429 (queue full) or 400 naming `prompt_field`.
  Submission submit(const Request& request, const char* prompt_field);
  HttpReply tokenize(const HttpRequest& request);
  HttpReply detokenize(const HttpRequest& request);
  HttpReply models() const;
  const text::Tokenizer& need_tokenizer(const char* what) const;

  EngineApi& engine_;
  std::optional<text::Tokenizer> tokenizer_;
  text::ChatTemplate chat_template_;
  ServiceOptions options_;
  ModelInfo info_;
  int64_t created_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> draining_{false};
  ServerMetrics metrics_;
};

}  // namespace rill::server
