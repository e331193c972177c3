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
    : kernels_(kernels), arena_bytes_(std::move(arena_bytes)), enabled_(enabled && kernels.supports_graphs()) {
  const char* v = std::getenv("RILL_GRAPH_INPUTS");
  staged_ = !(v && std::strcmp(v, "inline") == 0);
  RILL_ENSURE(!v || !staged_ || std::strcmp(v, "staged") == 0, "RILL_GRAPH_INPUTS={}: expected staged or inline", v);
}

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
  // Every graph recorded addresses in the old arena: drop them all before it goes, and let the
  // device finish with it first (an upload's copy queue does not wait for the step's stream).
  if (arena_width_ > 0) kernels_.synchronize();
  graphs_.clear();
  arena_width_ = std::max(width, arena_width_ * 2);
  StepBatch widest;  // the metadata of a full bucket at this width bounds every step's
  const int32_t B = kMaxBucket;
  widest.tokens.resize(B);
  widest.positions.resize(B);
  widest.slot_mapping.resize(B);
  widest.context_lens.resize(B);
  widest.cu_seqlens.resize(B + 1);
  widest.logit_indices.resize(B);
  widest.block_tables.resize(size_t(B) * size_t(arena_width_));
  region_ints_ = int64_t(step_metadata_bytes(widest) / sizeof(int32_t));
  arena_ = Arena();
  arena_ = Arena(kernels_.allocator(), arena_bytes_(B) + 2 * size_t(region_ints_) * sizeof(int32_t) + 1024);
  for (auto& u : uploads_) u.reset();
  if (staged_)
    for (auto& u : uploads_) u = kernels_.make_upload(size_t(region_ints_) * sizeof(int32_t));
  parity_ = 0;
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
  p.token_source = Tensor();
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
  // The rows' ids fed on the device (padding keeps id 0).
  const Tensor src = checked_token_source(batch);

  // The same arena offsets every time: the inputs land where the graphs recorded them, and the
  // body's temporaries never overlap the region the next step's upload writes.
  arena_.reset();
  Tensor regions = arena_.tensor(DType::i32, {2 * region_ints_});
  const int32_t region = staged_ ? parity_ : 0;
  const int64_t total = int64_t(step_metadata_bytes(p) / sizeof(int32_t));
  Tensor packed = regions.slice(region * region_ints_, region * region_ints_ + total);
  StepInputs inputs;
  Key key{bucket, width, buffers, region, nullptr, 0};
  if (staged_) {
    parity_ ^= 1;
    Upload& upload = *uploads_[region];
    inputs = lay_out_step_inputs(p, packed, static_cast<int32_t*>(upload.staging()));
    upload.start(packed);
    if (src.defined()) {
      RILL_ENSURE(src.device() == packed.device(), "[step] token_source {} must be on the step's device",
                  src.describe());
      key.ids = src.data();
      if (src.numel() == bucket) {
        inputs.ids = src;  // read in place
      } else {
        key.fed = src.numel();
      }
    }
  } else {
    scratch_.resize(size_t(total));
    inputs = lay_out_step_inputs(p, packed, scratch_.data());
    kernels_.upload(scratch_.data(), packed);
    if (src.defined()) {
      Tensor ids = inputs.ids.slice(0, src.numel());
      kernels_.copy(src, ids);
    }
  }
  inputs.attention.max_context_len = width * batch.block_size;
  // The graph's first node: fewer fed ids than the bucket, copied over the region's placeholders.
  auto feed = [&] {
    if (key.fed == 0) return;
    Tensor ids = inputs.ids.slice(0, key.fed);
    kernels_.copy(src, ids);
  };
  const size_t after_inputs = arena_.used();
  auto launch = [&]() -> Tensor {
    Recorded& rec = graphs_[key];
    if (rec.graph) {
      rec.graph->replay();
      return rec.logits;
    }
    if (!rec.logits.defined()) {
      // First step of this key: run eagerly (per-shape choices get made and cached now).
      feed();
      rec.logits = body(inputs, arena_, true);
      return rec.logits;
    }
    // Second step of this key: record it, then replay (recording runs nothing).
    kernels_.begin_capture();
    Tensor out;
    std::unique_ptr<StepGraph> graph;
    try {
      feed();
      out = body(inputs, arena_, true);
      graph = kernels_.end_capture();
    } catch (...) {
      kernels_.abort_capture();
      throw;
    }
    RILL_ENSURE(out.data() == rec.logits.data() && arena_.used() >= after_inputs,
                "[decode graphs] the step's logits moved between two runs of one shape");
    rec.graph = std::move(graph);
    logger().debug("decode graphs: recorded bucket {} (width {} blocks, region {}); {} graphs", bucket, width, region,
                   num_graphs());
    rec.graph->replay();
    return rec.logits;
  };
  // Whatever this step queued (all of it, or part of it before an error) reads the region: the
  // next upload into it waits for that.
  Tensor logits;
  try {
    logits = launch();
  } catch (...) {
    if (staged_) {
      try {
        uploads_[region]->release();
      } catch (...) {  // the step's own error is the one to report
      }
    }
    throw;
  }
  if (staged_) uploads_[region]->release();
  return logits.slice(0, rows);
}

size_t DecodeGraphs::num_graphs() const {
  size_t n = 0;
  for (const auto& [key, rec] : graphs_) n += rec.graph ? 1 : 0;
  return n;
}

}  // namespace rill
