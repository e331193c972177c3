// server/generation.h — the text side of one engine request: per sequence an incremental
// detokenizer (incomplete UTF-8 held back) and a stop matcher, turning TokenEvents into text
// deltas with their logprobs and finish reasons. Shared by every generating endpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/engine_api.h"
#include "server/metrics.h"
#include "server/stop_matcher.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace rill::server {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;
};

/// New output of one sequence since the last poll.
struct SequenceDelta {
  int32_t sequence = 0;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::optional<std::string> finish_reason;  ///< "stop", "length" (set once, on the last delta)
  std::string stop_sequence;                 ///< the stop string that ended it, if any
};

class Generation {
 public:
  Generation(EngineApi& engine, const text::Tokenizer& tokenizer, RequestHandle handle, int32_t n,
             std::vector<std::string> stops, bool logprobs, ServerMetrics* metrics = nullptr);
  ~Generation();  ///< cancels the engine request if it is still running
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  /// A hard cap on a reasoning model's thinking (Anthropic's thinking.budget_tokens), for a request
  /// of one sequence: once `budget` tokens have come without `end_tag` in their text, the engine
  /// request is cancelled and continued — `request` (the one submitted) with those tokens and
  /// `close` (the end tag's ids, e.g. "\n</think>\n\n") appended to its prompt and max_tokens less
  /// all of them. The close tokens' text passes on as generated text and counts as completion tokens;
  /// the prefix cache makes the continuation's prefill the close tokens alone.
  struct ThinkingBudget {
    int32_t budget = 0;
    std::string end_tag;
    std::vector<int32_t> close;
    Request request;
  };
  void set_thinking_budget(ThinkingBudget budget);
  /// Takes every queued event; returns the deltas (at most one per sequence per call).
  std::vector<SequenceDelta> poll();
  /// All sequences finished (and the engine request ended or was cancelled).
  bool done() const { return done_; }
  void cancel();
  int32_t prompt_tokens() const { return prompt_tokens_; }
  int32_t cached_tokens() const { return cached_tokens_; }
  int32_t completion_tokens() const;
  const std::string& error() const { return error_; }
  /// The prompt tokens' logprobs (SamplingParams::prompt_logprobs), prompt tokens 1.., once the
  /// request's first token has arrived; empty before (and for a one-token prompt).
  const std::vector<PromptLogprob>& prompt_logprobs() const { return prompt_logprobs_; }
  /// Whether the first token (which carries the prompt logprobs) or the request's end has arrived.
  bool prompt_scored() const { return first_token_seen_ || engine_done_; }

 private:
  struct Seq {
    text::IncrementalDetokenizer detok;
    StopMatcher stop;
    int32_t tokens = 0;
    bool finished = false;
  };
  EngineApi& engine_;
  const text::Tokenizer& tokenizer_;
  RequestHandle handle_;
  std::vector<Seq> seqs_;
  bool logprobs_;
  ServerMetrics* metrics_;
  bool ttft_seen_ = false;
  bool done_ = false, engine_done_ = false;
  int32_t prompt_tokens_ = 0, cached_tokens_ = 0;
  std::string error_;
  std::vector<PromptLogprob> prompt_logprobs_;
  bool first_token_seen_ = false;
  // Thinking budget (set_thinking_budget): the tokens so far and a tail of their text (for the tag).
  std::optional<ThinkingBudget> budget_;
  std::vector<int32_t> ids_;
  std::string thought_tail_;
  bool continued_ = false;  // the budget was reached: handle_ is the continuation
  /// Cancels the request at the budget and submits its continuation; false when it ends instead.
  bool continue_past_budget(Seq& s, SequenceDelta& d);
};

}  // namespace rill::server
