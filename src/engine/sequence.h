// engine/sequence.h — the engine-side state of a request (RequestState) and of each of its n
// generation streams (Sequence). Owned by EngineCore, touched only by the engine thread.
// Invariant: tokens[0, num_computed) have their K/V in table's blocks (and, for a hybrid model,
// their recurrent state in `slot`); a live sequence always has at least one uncomputed token.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/request.h"
#include "kernels/kernels.h"

namespace rill {

using Clock = std::chrono::steady_clock;

struct RequestState;

enum class SequenceStatus { waiting, running, finished };

/// A sequence's last token while the step that draws it is still on the device (overlapped steps:
/// EngineCore). Never a row's token outside its own one-token decode row (Executor).
constexpr int32_t kPendingToken = -1;

struct Sequence {
  uint64_t id = 0;  ///< engine-wide, increasing: lower id = earlier arrival = higher priority
  RequestState* request = nullptr;
  int32_t index = 0;  ///< which of the request's n sequences
  std::vector<int32_t> tokens;  ///< prompt, then generated tokens
  int32_t prompt_len = 0;
  int32_t num_computed = 0;
  /// Prompt logprobs (SamplingParams::prompt_logprobs): prompt tokens [1, prompt_scored) are scored
  /// (their logits launched); >= prompt_len when all are, or none are wanted (the default).
  int32_t prompt_scored = INT32_MAX;
  BlockTable table;
  /// Hybrid models: the StatePool slot holding this sequence's recurrent state (-1: none), and
  /// the slots reserved at admission for the n - 1 sequences it forks into after its prompt.
  int32_t slot = -1;
  std::vector<int32_t> fork_slots;
  SequenceStatus status = SequenceStatus::waiting;
  bool awaiting_fork = false;  ///< n > 1 and the prompt's first token has not been drawn yet
  uint64_t seed = 0;           ///< this sequence's random stream
  uint64_t scheduled_step = ~0ull;  ///< the step that last gave it a row
  /// The index of this sequence's draw among the draws of the launched, uncollected step (-1:
  /// none). While it is >= 0 the last token is kPendingToken, unless that draw is the sequence's
  /// last by length (then nothing is appended and the sequence waits for it with no row).
  int32_t pending_draw = -1;
  /// Speculative decoding: the last num_drafts tokens are drafts (engine/spec/) in the step being
  /// planned or run, not yet the sequence's; the step's draws decide how many stay (EngineCore).
  /// 0 outside such a step.
  int32_t num_drafts = 0;
  /// Hybrid models, while num_drafts > 0: a slot holding the state from before the row, restored
  /// when a draft is rejected (-1: none).
  int32_t spec_slot = -1;
  int32_t num_preemptions = 0;
  /// Logit adjustments (penalties, bias) by token, kept only when the request uses any.
  std::unordered_map<int32_t, SamplingAdjust> adjust;
  Clock::time_point last_token_time{};

  int32_t length() const { return int32_t(tokens.size()); }
  int32_t num_output() const { return length() - prompt_len; }
  int32_t num_uncomputed() const { return length() - num_computed; }
  /// Whether prompt tokens remain to be scored (their logits not yet launched).
  bool scoring() const { return prompt_scored < prompt_len; }
  /// The prompt tokens a row of tokens [start, start + n) scores: [first, end) (empty when
  /// first >= end). Token t is scored by the logits at position t - 1.
  std::pair<int32_t, int32_t> scored_targets(int32_t start, int32_t n) const {
    return {std::max(prompt_scored, start + 1), std::min(prompt_len, start + n + 1)};
  }
  /// Appends a drawn token (and counts it for the penalties).
  void append(int32_t token);
  /// The pending draw has arrived: it replaces the kPendingToken at the end, or is appended when
  /// none was placed (and is counted for the penalties either way).
  void fill_pending(int32_t token);
};

struct RequestState {
  uint64_t id = 0;
  Request request;
  RequestHandle stream;
  uint64_t ns_key = 0;  ///< prefix-cache namespace key (model identity + layout + request namespace)
  uint64_t seed = 0;
  bool uses_adjust = false;
  std::vector<std::unique_ptr<Sequence>> sequences;
  int32_t num_finished = 0;
  int32_t cached_tokens = 0;
  bool cached_tokens_known = false;
  /// Prompt logprobs collected so far (prompt tokens 1..), handed to the first token event.
  std::vector<PromptLogprob> prompt_logprobs;
  Clock::time_point submitted{};
  Clock::time_point first_token{};
  bool has_first_token = false;
};

/// The random stream of sequence `index` of a request seeded `seed`.
uint64_t sequence_seed(uint64_t request_seed, int32_t index);
/// The adjust table a new sequence starts from: bias entries, and the prompt's tokens when the
/// repetition penalty is on.
std::unordered_map<int32_t, SamplingAdjust> initial_adjust(const Request& request);

}  // namespace rill
