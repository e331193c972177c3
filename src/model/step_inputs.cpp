// model/step_inputs.cpp — see step_inputs.h.
#include "model/step_inputs.h"

namespace rill {
namespace {

Tensor upload_i32(Kernels& kernels, Arena& arena, const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  Tensor t = arena.tensor(DType::i32, shape);
  kernels.upload(v.data(), t);
  return t;
}

size_t rounded(size_t n) { return (n * sizeof(int32_t) + 255) / 256 * 256; }

}  // namespace

size_t step_metadata_bytes(const StepBatch& b) {
  return rounded(b.cu_seqlens.size()) + rounded(b.context_lens.size()) + rounded(b.block_tables.size()) +
         rounded(b.slot_mapping.size()) + rounded(b.positions.size()) + rounded(b.tokens.size()) +
         rounded(b.logit_indices.size());
}

StepInputs upload_step_inputs(Kernels& kernels, Arena& arena, const StepBatch& batch) {
  StepInputs in;
  AttentionBatch& ab = in.attention;
  const int64_t T = batch.num_tokens();
  ab.num_rows = batch.num_rows();
  ab.max_seqlen_q = batch.max_seqlen_q();
  ab.max_context_len = batch.max_context_len();
  ab.cu_seqlens_q = upload_i32(kernels, arena, batch.cu_seqlens, {ab.num_rows + 1});
  ab.context_lens = upload_i32(kernels, arena, batch.context_lens, {ab.num_rows});
  ab.block_tables = upload_i32(kernels, arena, batch.block_tables, {ab.num_rows, batch.max_blocks_per_row});
  ab.slot_mapping = upload_i32(kernels, arena, batch.slot_mapping, {T});
  ab.positions = upload_i32(kernels, arena, batch.positions, {T});
  in.ids = upload_i32(kernels, arena, batch.tokens, {T});
  return in;
}

}  // namespace rill
