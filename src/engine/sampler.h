// engine/sampler.h — Sampler: turns the step's logits into one token per sampling row, on the
// model's device through Kernels::sample(). It packs each row's SamplingRowParams and logit
// adjustments, runs the op, and reads back tokens (and logprobs when asked). Buffers grow to the
// largest step seen and are reused, so a steady-state step allocates nothing on the device.
// launch() queues the draw and a copy of its results behind it without waiting; collect() waits for
// that copy. Two sets of output buffers alternate, so the next step may be launched — its tokens
// fed on the device from last_tokens() — before the previous step's results are collected.
//
// Semantics (per row, each row from its own inputs only):
//  1. x = logits (f32). Logprobs are log_softmax(x) of these raw logits, as vLLM returns by
//     default (OpenAI does not define it for penalised sampling): the chosen token's, and the
//     top-N alternatives (N <= 20, best first, lower id on ties).
//  2. For each adjusted token: repetition penalty when the token is in the prompt or the output
//     (HF: x / r if x > 0 else x * r), then x -= frequency * count + presence (output tokens),
//     then x += bias.
//  3. temperature 0: argmax (lowest id on ties). Otherwise x /= temperature, then the kept set is
//     cut by top-k (the k-th largest value; ties at the boundary kept), top-p over the top-k
//     survivors (the smallest top set whose mass reaches top_p, ties kept) and min-p
//     (p >= min_p * p_max), and the token is argmax over the kept set of x - max + Gumbel noise,
//     the noise a pure function of (sequence seed, step, token): an exact draw from the renormalised
//     distribution that does not depend on the other rows of the step.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "engine/request.h"
#include "kernels/kernels.h"
#include "model/model.h"

namespace rill {

/// One draw: from logits row `logit_row`, for a sequence with these controls.
struct SampleRow {
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;
  uint64_t step = 0;  ///< index of the token being drawn (the sequence's output length)
  int32_t logit_row = 0;
  const std::unordered_map<int32_t, SamplingAdjust>* adjust = nullptr;  ///< may be null
  /// >= 0: the sequence's last draw is not in `adjust` yet; it is pending_tokens[pending] on the
  /// device (launch()'s argument) and counts as an output token (SamplingRowParams::pending).
  int32_t pending = -1;
  /// Tokens counted as output tokens on top of `adjust` (a verifying row's drafts before this
  /// position: the penalties of the draw that follows them); read only with `adjust`.
  std::span<const int32_t> counted = {};
  /// >= 0: no draw — the row scores this prompt token (its logprob and params->prompt_logprobs
  /// alternatives: SamplingRowParams::score_token).
  int32_t score_token = -1;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

class Sampler {
 public:
  explicit Sampler(Kernels& kernels) : kernels_(kernels) {}
  /// Draws rows.size() tokens from `logits` [L, V] (on the device). Results in `out`.
  void sample(const Tensor& logits, std::span<const SampleRow> rows, std::vector<SampledToken>& out);

  /// Queues the draws of `rows` from `logits` and the copy of their results to the host; returns at
  /// once. The rows' params and adjust tables are read here (they may change afterwards). At most
  /// one launch may be uncollected when the next is made: the one before that must be collected.
  void launch(const Tensor& logits, std::span<const SampleRow> rows, const Tensor& pending_tokens = Tensor());
  /// Waits for the oldest uncollected launch's results and returns them in `out` (one per row).
  void collect(std::vector<SampledToken>& out);
  /// The drawn ids of the last launch, i32 [rows] on the device (valid until the launch after next).
  Tensor last_tokens() const;
  /// Forgets uncollected launches (after a failed step); their copies' bytes are never read.
  void abandon();
  /// Launches not yet collected (0, 1 or 2).
  int pending() const { return int(pending_); }

 private:
  // One launch's outputs: [R] i32 tokens, then (at kLogprobsOffset-aligned offsets) [R, 1 + K] f32
  // logprobs and [R, K] i32 top ids, in one buffer so that one copy brings them back.
  struct Slot {
    Buffer out;
    std::unique_ptr<Readback> readback;
    int64_t rows = 0;
    bool logprobs = false;        ///< the copy covers the logprobs and top ids too
    std::vector<int32_t> num_top;  ///< per row: top logprobs asked (-1: no logprobs)
  };
  Tensor device_tensor(Buffer& buffer, DType dtype, std::initializer_list<int64_t> shape);
  /// Appends a row's adjust entries to host_adjust_, with `counted`'s tokens counted (SampleRow).
  void pack_adjust(const std::unordered_map<int32_t, SamplingAdjust>& adjust, std::span<const int32_t> counted);

  Kernels& kernels_;
  Buffer params_, adjust_, workspace_;
  Slot slots_[2];
  unsigned next_ = 0;     ///< the slot the next launch uses
  unsigned pending_ = 0;  ///< launches made but not collected
  std::vector<SamplingRowParams> host_params_;
  std::vector<SamplingAdjust> host_adjust_;
};

}  // namespace rill
