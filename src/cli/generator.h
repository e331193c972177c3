// cli/generator.h — one sequence generated with a model directly (prompt prefill in chunks, then
// token-by-token decode) for `rill run` and `rill bench`. The serving engine (engine/) is the
// multi-request path; this is the single-stream tool path.
#pragma once

#include <cstdint>
#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "model/model.h"

namespace rill::cli {

struct SamplingOptions {
  float temperature = 0.f;  ///< 0: greedy
  float top_p = 1.f;
  int32_t top_k = 0;        ///< 0: off
  uint64_t seed = 0;
};

/// Picks the next token from host logits [V].
class HostSampler {
 public:
  explicit HostSampler(const SamplingOptions& o) : o_(o), rng_(o.seed) {}
  int32_t sample(std::vector<float> logits);

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
};

class Generator {
 public:
  /// KV space for `max_context` tokens of one sequence.
  Generator(Model& model, int32_t max_context, int32_t block_size = 16, int32_t prefill_chunk = 512);
  /// Appends tokens to the sequence; returns host logits of the last one.
  std::vector<float> feed(const std::vector<int32_t>& tokens);
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
