// cli/generator.h — one sequence generated with a model directly (prompt prefill in chunks, then
// token-by-token decode) for `rill run`. The serving engine (engine/) is the
// multi-request path; this is the single-stream tool path.
#pragma once

#include <cstdint>
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"

namespace rill::cli {

struct SamplingOptions {
  float temperature = 0.f;  ///< 0: greedy
  float top_p = 1.f;
  int32_t top_k = 0;        ///< 0: off
  uint64_t seed = 0;
};

/// Picks each next token on the model's device with the serving engine's Sampler (the API's
/// sampling semantics; temperature 0: argmax, lowest id on ties) and reads back only its id — not
/// the vocabulary's logits.
class TokenPicker {
 public:
  TokenPicker(Kernels& kernels, const SamplingOptions& o);
  /// The token drawn from the last row of `logits` (on the device, [R, V]); each pick is the next
  /// step of the picker's random stream (so chat turns do not repeat their draws).
  int32_t pick(const Tensor& logits);

 private:
  Sampler sampler_;
  SamplingParams params_;
  uint64_t seed_, step_ = 0;
  std::vector<SampledToken> out_;
};

class Generator {
 public:
  /// KV space for `max_context` tokens of one sequence.
  Generator(Model& model, int32_t max_context, int32_t block_size = 16, int32_t prefill_chunk = 512);
  /// Appends tokens to the sequence; returns the last one's logits ([1, V] on the model's device,
  /// valid until the next feed).
  Tensor feed(const std::vector<int32_t>& tokens);
  int32_t length() const { return length_; }
  /// Forgets tokens past `length` (their KV slots are overwritten by later feeds).
  void truncate(int32_t length) { length_ = std::min(length_, length); }
  int32_t max_context() const { return max_context_; }

 private:
  Model& model_;
  int32_t block_size_, prefill_chunk_, max_context_;
  KvBuffers kv_;
  std::vector<int32_t> blocks_;
  int32_t length_ = 0;
};

}  // namespace rill::cli
