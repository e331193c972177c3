// model/decode_graphs.h — DecodeGraphs: decode steps replayed from captured step graphs.
// A decode step (every row adds exactly one token and wants its logits) is padded to a batch
// bucket of 1, 2, 4, ..., 256 rows and runs through a graph captured once per (bucket, block-table
// width class). Before each replay the step's metadata is uploaded in place (one host→device copy)
// into the graph's own arena, so a decode step costs the host one upload, one graph launch and,
// later, reading the sampled ids — instead of hundreds of kernel launches.
//
// Padding rows add token 0 at position 0 with context length 1, an all-zero block table and slot
// -1 (their K/V are never written); their logits are computed and ignored. The attention hint
// max_context_len is the width class × block size, an upper bound fixed per graph, so every launch
// configuration recorded in the graph holds for any context that fits the width.
//
// The first step of a new (bucket, width) runs eagerly (which also fixes every per-shape choice,
// e.g. the matmul algorithms, before recording), is then recorded, and replays from the next step
// on. Growing the arena (a wider block table than ever seen) drops every graph.
#pragma once

#include <cstdint>
#include <functional>
#include <compare>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "kernels/kernels.h"
#include "model/step_batch.h"
#include "model/step_inputs.h"

namespace rill {

class DecodeGraphs {
 public:
  /// Runs a step's layers from its uploaded inputs, taking temporaries from `arena`; returns the
  /// logits of every row ([rows, vocab]) when `all_rows_logits`, else of inputs.logit_index's rows.
  using Body = std::function<Tensor(const StepInputs& inputs, Arena& arena, bool all_rows_logits)>;
  /// Bytes of arena the body needs for `tokens` rows (metadata excluded).
  using ArenaBytes = std::function<size_t(int64_t tokens)>;

  static constexpr int32_t kMaxBucket = 256;

  DecodeGraphs(Kernels& kernels, ArenaBytes arena_bytes, bool enabled);

  /// True when `batch` may run through a graph: graphs enabled and supported by the backend,
  /// 1..256 rows, one new token per row, logits of every row in row order.
  bool eligible(const StepBatch& batch) const;
  /// Runs an eligible batch; returns its logits [rows, vocab], valid until the next step.
  /// `buffers` identifies the step's other device buffers the graph records (the KV cache
  /// layers' addresses): a graph recorded against other buffers is never replayed.
  Tensor run(const StepBatch& batch, uint64_t buffers, const Body& body);

  bool enabled() const { return enabled_; }
  size_t num_graphs() const;
  /// The bucket a step of `rows` rows is padded to.
  static int32_t bucket_for(int32_t rows);

 private:
  void ensure_arena(int32_t width);

  Kernels& kernels_;
  ArenaBytes arena_bytes_;
  bool enabled_;
  Arena arena_;
  int32_t arena_width_ = 0;  // block-table width the arena is sized for
  struct Key {
    int32_t bucket, width;
    uint64_t buffers;
    auto operator<=>(const Key&) const = default;
  };
  struct Recorded {
    std::unique_ptr<StepGraph> graph;  // null until the shape's second step
    Tensor logits;                     // [bucket, vocab] in the arena
  };
  std::map<Key, Recorded> graphs_;
  StepBatch padded_;
  std::vector<int32_t> scratch_;
};

/// True unless the environment sets RILL_CUDA_GRAPHS=0 (graphs are on by default).
bool cuda_graphs_enabled_by_env();

}  // namespace rill
