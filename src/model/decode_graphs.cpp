// model/decode_graphs.cpp — see decode_graphs.h.
#include "model/decode_graphs.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace rill {
namespace {

// Block-table width classes: powers of two from 16 blocks, so a growing context re-records a
// bucket's graph O(log context) times.
int32_t width_class(int32_t blocks) {
  int32_t w = 16;
  while (w < blocks) w *= 2;
  return w;
}

}  // namespace

bool cuda_graphs_enabled_by_env() {
  const char* v = std::getenv("RILL_CUDA_GRAPHS");
  return !(v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0));
}

DecodeGraphs::DecodeGraphs(Kernels& kernels, ArenaBytes arena_bytes, bool enabled)
    : kernels_(kernels), arena_bytes_(std::move(arena_bytes)), enabled_(enabled && kernels.supports_graphs()) {}

int32_t DecodeGraphs::bucket_for(int32_t rows) {
  int32_t b = 1;
  while (b < rows) b *= 2;
  return b;
}

bool DecodeGraphs::eligible(const StepBatch& batch) const {
  if (!enabled_) return false;
  const int32_t rows = batch.num_rows();
  if (rows < 1 || rows > kMaxBucket || batch.num_tokens() != rows) return false;
  if (int32_t(batch.logit_indices.size()) != rows) return false;
  for (int32_t r = 0; r < rows; ++r)
    if (batch.logit_indices[size_t(r)] != r || batch.cu_seqlens[size_t(r + 1)] != r + 1) return false;
  return batch.state_slots.empty();
}

void DecodeGraphs::ensure_arena(int32_t width) {
  if (width <= arena_width_) return;
  // Every graph recorded addresses in the old arena: drop them all before it goes.
  graphs_.clear();
  arena_width_ = std::max(width, arena_width_ * 2);
  const int64_t B = kMaxBucket;
  const size_t meta = (size_t(B) * size_t(arena_width_) + 8 * size_t(B) + 8 * 64) * sizeof(int32_t);
  arena_ = Arena();
  arena_ = Arena(kernels_.allocator(), arena_bytes_(B) + meta);
}

Tensor DecodeGraphs::run(const StepBatch& batch, uint64_t buffers, const Body& body) {
  RILL_ENSURE(eligible(batch), "[decode graphs] step of {} rows / {} tokens is not a decode step", batch.num_rows(),
              batch.num_tokens());
  const int32_t rows = batch.num_rows();
  const int32_t bucket = bucket_for(rows);
  const int32_t width = width_class(std::max(1, batch.max_blocks_per_row));
  ensure_arena(width);

  // The padded step, in reused host vectors.
  StepBatch& p = padded_;
  p.block_size = batch.block_size;
  p.max_blocks_per_row = width;
  p.tokens.assign(size_t(bucket), 0);
  p.positions.assign(size_t(bucket), 0);
  p.slot_mapping.assign(size_t(bucket), -1);
  p.context_lens.assign(size_t(bucket), 1);
  p.cu_seqlens.resize(size_t(bucket) + 1);
  p.logit_indices.resize(size_t(bucket));
  p.block_tables.assign(size_t(bucket) * size_t(width), 0);
  p.state_slots.clear();
  p.token_source = batch.token_source;  // the rows' ids, copied over the uploaded ones (padding keeps 0)
  for (int32_t r = 0; r <= bucket; ++r) p.cu_seqlens[size_t(r)] = r;
  for (int32_t r = 0; r < bucket; ++r) p.logit_indices[size_t(r)] = r;
  for (int32_t r = 0; r < rows; ++r) {
    p.tokens[size_t(r)] = batch.tokens[size_t(r)];
    p.positions[size_t(r)] = batch.positions[size_t(r)];
    p.slot_mapping[size_t(r)] = batch.slot_mapping[size_t(r)];
    p.context_lens[size_t(r)] = batch.context_lens[size_t(r)];
    std::copy_n(batch.block_tables.begin() + std::ptrdiff_t(size_t(r) * size_t(batch.max_blocks_per_row)),
                batch.max_blocks_per_row, p.block_tables.begin() + std::ptrdiff_t(size_t(r) * size_t(width)));
  }

  // Same arena offsets every time for a given (bucket, width): the inputs land where the graph
  // recorded them.
  arena_.reset();
  StepInputs inputs = upload_step_inputs(kernels_, arena_, p, scratch_);
  inputs.attention.max_context_len = width * batch.block_size;
  const size_t after_inputs = arena_.used();

  Recorded& rec = graphs_[Key{bucket, width, buffers}];
  if (rec.graph) {
    rec.graph->replay();
    return rec.logits.slice(0, rows);
  }
  if (!rec.logits.defined()) {
    // First step of this shape: run eagerly (per-shape choices get made and cached now).
    rec.logits = body(inputs, arena_, true);
    return rec.logits.slice(0, rows);
  }
  // Second step of this shape: record it, then replay (recording runs nothing).
  kernels_.begin_capture();
  Tensor out;
  std::unique_ptr<StepGraph> graph;
  try {
    out = body(inputs, arena_, true);
    graph = kernels_.end_capture();
  } catch (...) {
    kernels_.abort_capture();
    throw;
  }
  RILL_ENSURE(out.data() == rec.logits.data() && arena_.used() >= after_inputs,
              "[decode graphs] the step's logits moved between two runs of one shape");
  rec.graph = std::move(graph);
  logger().debug("decode graphs: recorded bucket {} (width {} blocks); {} graphs", bucket, width, num_graphs());
  rec.graph->replay();
  return rec.logits.slice(0, rows);
}

size_t DecodeGraphs::num_graphs() const {
  size_t n = 0;
  for (const auto& [key, rec] : graphs_) n += rec.graph ? 1 : 0;
  return n;
}

}  // namespace rill
