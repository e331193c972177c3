// server/openai_job.h — one /v1/chat/completions or /v1/completions request in flight: drives a
// Generation and writes OpenAI's response shapes (the final JSON, or SSE chunks with usage and
// the [DONE] marker).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/http_server.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "text/reasoning.h"
#include "text/tool_calls.h"

namespace rill::server {

class OpenAIJob : public StreamJob {
 public:
  /// `handles`: one engine request per prompt (OpenAIRequest::more_prompts after the first), in order.
  OpenAIJob(EngineApi& engine, const text::Tokenizer& tokenizer, OpenAIRequest request,
            std::vector<RequestHandle> handles, std::string id, int64_t created, ServerMetrics* metrics = nullptr);
  bool poll(std::string& out) override;
  void cancel() override {
    for (auto& g : gens_) g->cancel();
  }
  int status() const override { return status_; }

 private:
  struct Choice {
    std::string text;
    ojson logprobs = ojson::array();  // chat: content entries; completions: built at the end
    std::vector<TokenLogprob> raw;
    std::string finish_reason;
    text::ToolCallParser parser;
    text::ReasoningSplitter splitter;
    std::string reasoning;
    ojson tool_calls = ojson::array();
  };
  ojson chunk_base() const;
  ojson logprob_entries(const std::vector<TokenLogprob>& lps, size_t text_offset) const;
  /// Completions with echo and logprobs: prompt k's tokens' entries (the first token's logprob and
  /// alternatives null, as OpenAI gives them), text offsets from 0.
  ojson prompt_logprob_entries(size_t k) const;
  const std::vector<int32_t>& prompt(size_t k) const { return k == 0 ? req_.request.prompt : req_.more_prompts[k - 1]; }
  const std::string& prompt_text(size_t k) const { return k == 0 ? req_.prompt_text : req_.more_prompt_texts[k - 1]; }
  bool all_done() const;
  std::string first_error() const;
  bool echo_scores() const { return !req_.chat && req_.echo && req_.logprobs; }
  ojson usage() const;
  std::string final_body();
  ojson tool_call_json(const text::ToolCall& call, size_t index);

  const text::Tokenizer& tokenizer_;
  OpenAIRequest req_;
  std::vector<std::unique_ptr<Generation>> gens_;  // one a prompt; choice k · n + i is prompt k's sequence i
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;
  bool started_ = false;
  int status_ = 200;
};

}  // namespace rill::server
