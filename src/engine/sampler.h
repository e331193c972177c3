// engine/sampler.h — Sampler: turns the step's logits into one token per sampling row, on the
// model's device through Kernels::sample(). It packs each row's SamplingRowParams and logit
// adjustments, runs the op, and reads back tokens (and logprobs when asked). Buffers grow to the
// largest step seen and are reused, so a steady-state step allocates nothing on the device.
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

 private:
  Tensor device_tensor(Buffer& buffer, DType dtype, std::initializer_list<int64_t> shape);

  Kernels& kernels_;
  Buffer params_, adjust_, workspace_, tokens_, logprobs_, top_ids_;
  std::vector<SamplingRowParams> host_params_;
  std::vector<SamplingAdjust> host_adjust_;
  std::vector<int32_t> host_tokens_, host_top_ids_;
  std::vector<float> host_logprobs_;
};

}  // namespace rill
