// engine/request.h — what a caller submits (Request, SamplingParams) and what it receives
// (TokenEvent through a RequestStream). Plain data plus the one per-request channel; the engine
// thread is the only producer of a stream, the caller its only consumer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rill {

/// Sampling controls of one request (OpenAI/vLLM names and defaults). Applied in this order:
/// repetition penalty (prompt and output tokens), presence and frequency penalties (output
/// tokens), logit bias, temperature (0: greedy), top-k, top-p (over the top-k survivors), min-p.
struct SamplingParams {
  float temperature = 1.f;
  float top_p = 1.f;
  int32_t top_k = 0;  ///< 0 (or -1): off
  float min_p = 0.f;
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< (token, added to its logit)
  /// Seed of the request's random stream; nullopt: the engine picks one. Sequence i of n draws
  /// from its own stream derived from (seed, i); token t of a sequence uses key (stream, t).
  std::optional<uint64_t> seed;
  /// Report the chosen token's logprob (true) and this many top alternatives (0..20).
  bool logprobs = false;
  int32_t top_logprobs = 0;
  /// >= 0: also report each prompt token's logprob under the tokens before it (from the second
  /// prompt token on; the raw log-softmax, as for generated tokens) and this many top alternatives
  /// (0..20): how evaluation harnesses score a text. -1: off. Such a request reuses no cached
  /// prefix for the prompt tokens it scores (their logits must be computed).
  int32_t prompt_logprobs = -1;
  int32_t n = 1;  ///< sequences generated from the one prompt (they share its KV blocks)
};

struct Request {
  std::vector<int32_t> prompt;  ///< token ids, at least one
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  ///< the sequence ends after emitting one (EOS goes here)
  int32_t max_tokens = 16;              ///< tokens generated per sequence, at least 1
  /// Prefix-cache namespace: only requests with equal namespaces share cached blocks
  /// (e.g. a tenant, or a LoRA adapter). The engine adds the model identity and KV layout.
  std::string cache_namespace;
  /// A conversation id: when the request ends, its last prompt boundary stays pinned in the prefix
  /// cache for the session's next request (engine/session.h). Empty: none.
  std::string session_id;
};

enum class FinishReason { none, stop, length, cancelled, error };
const char* finish_reason_name(FinishReason r);

/// Why submit() refused a request (the server maps queue_full to 429, the rest to 400).
enum class RejectReason { none, queue_full, too_long, invalid };

/// A prompt token's logprob under the tokens before it, and its top alternatives (best first).
struct PromptLogprob {
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

/// One event of a request's stream: a generated token of one sequence, and/or its end.
struct TokenEvent {
  int32_t sequence = 0;  ///< which of the request's n sequences
  int32_t token = -1;    ///< -1 when the event only reports an end (cancel, error)
  float logprob = 0.f;   ///< when SamplingParams::logprobs
  std::vector<std::pair<int32_t, float>> top_logprobs;
  /// SamplingParams::prompt_logprobs: on the request's first token event, prompt tokens 1, 2, ...
  /// (prompt[0] has none), one entry each.
  std::vector<PromptLogprob> prompt_logprobs;
  FinishReason finish = FinishReason::none;  ///< set on the sequence's last event
  bool request_done = false;                 ///< the last event of the whole request
  std::string error;                         ///< when finish == error
  // Request-level figures, filled on every event (final on the last).
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  ///< prompt tokens served from the prefix cache (first admission)
  double ttft_s = 0;          ///< submit → first token of sequence 0
  double itl_s = 0;  ///< time since this sequence's previous token (0 on its first token)
};

/// The channel of one request: the engine pushes, the caller pops. Thread-safe.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }
  /// Blocks for the next event; nullopt once the request's last event was taken.
  std::optional<TokenEvent> next();
  /// The next event if one is queued.
  std::optional<TokenEvent> try_next();
  /// Blocks like next() but gives up after `timeout` (nullopt; check done()).
  std::optional<TokenEvent> next_for(std::chrono::milliseconds timeout);
  /// True once the last event was taken.
  bool done() const;

  void push(TokenEvent event);  ///< engine side

 private:
  std::optional<TokenEvent> pop_locked();
  const uint64_t id_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<TokenEvent> events_;
  bool closed_ = false;  // the request_done event was pushed
  bool drained_ = false;
};

using RequestHandle = std::shared_ptr<RequestStream>;

/// What submit() returns: a stream, or a typed refusal with a message naming the limit.
struct Submission {
  RequestHandle handle;
  RejectReason reject = RejectReason::none;
  std::string message;
  bool ok() const { return reject == RejectReason::none; }
};

/// Everything a stream delivered, gathered (tests, the CLI, non-streaming endpoints).
struct RequestResult {
  std::vector<std::vector<int32_t>> tokens;  ///< per sequence
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> top_logprobs;
  std::vector<PromptLogprob> prompt_logprobs;  ///< prompt tokens 1.. (SamplingParams::prompt_logprobs)
  std::vector<FinishReason> finish;
  std::string error;
  int32_t prompt_tokens = 0, cached_tokens = 0;
  double ttft_s = 0;
};
/// Drains `stream` until its last event.
RequestResult collect(RequestStream& stream);

}  // namespace rill
