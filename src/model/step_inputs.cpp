// model/step_inputs.cpp — see step_inputs.h.
#include "model/step_inputs.h"

#include <algorithm>

#include "core/error.h"

namespace rill {
namespace {

constexpr size_t kAlignInts = 64;  // 256 bytes: the arena's alignment, kept for every part

size_t rounded_ints(size_t n) { return (n + kAlignInts - 1) / kAlignInts * kAlignInts; }

}  // namespace

size_t step_metadata_bytes(const StepBatch& b) {
  const size_t ints = rounded_ints(b.cu_seqlens.size()) + rounded_ints(b.context_lens.size()) +
                      rounded_ints(b.block_tables.size()) + rounded_ints(b.slot_mapping.size()) +
                      rounded_ints(b.positions.size()) + rounded_ints(b.tokens.size()) +
                      rounded_ints(b.logit_indices.size());
  return ints * sizeof(int32_t);
}

StepInputs upload_step_inputs(Kernels& kernels, Arena& arena, const StepBatch& batch, std::vector<int32_t>& scratch) {
  const int64_t T = batch.num_tokens(), rows = batch.num_rows(), R = int64_t(batch.logit_indices.size());
  const size_t total = step_metadata_bytes(batch) / sizeof(int32_t);
  scratch.assign(total, 0);
  Tensor packed = arena.tensor(DType::i32, {int64_t(std::max<size_t>(total, 1))});
  int32_t* device = packed.data_as<int32_t>();
  size_t offset = 0;
  // Copies one part into the staging vector and returns its view in the packed device tensor.
  auto part = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
    std::copy(v.begin(), v.end(), scratch.begin() + std::ptrdiff_t(offset));
    Tensor t(device + offset, DType::i32, shape, packed.device());
    offset += rounded_ints(v.size());
    return t;
  };
  StepInputs in;
  AttentionBatch& ab = in.attention;
  ab.num_rows = int32_t(rows);
  ab.max_seqlen_q = batch.max_seqlen_q();
  ab.max_context_len = batch.max_context_len();
  ab.cu_seqlens_q = part(batch.cu_seqlens, {rows + 1});
  ab.context_lens = part(batch.context_lens, {rows});
  ab.block_tables = part(batch.block_tables, {rows, batch.max_blocks_per_row});
  ab.slot_mapping = part(batch.slot_mapping, {T});
  ab.positions = part(batch.positions, {T});
  in.ids = part(batch.tokens, {T});
  in.logit_index = part(batch.logit_indices, {R});
  if (total > 0) kernels.upload(scratch.data(), packed.view({int64_t(total)}));
  if (batch.token_source.defined()) {
    const Tensor& src = batch.token_source;
    RILL_ENSURE(src.dtype() == DType::i32 && src.is_contiguous() && src.device() == packed.device() &&
                    src.numel() >= 1 && src.numel() <= T,
                "[step] token_source {} must be a contiguous i32 tensor of 1..{} ids on the step's device",
                src.describe(), T);
    Tensor ids = in.ids.slice(0, src.numel());
    kernels.copy(src.view({src.numel()}), ids);
  }
  return in;
}

StepInputs upload_step_inputs(Kernels& kernels, Arena& arena, const StepBatch& batch) {
  std::vector<int32_t> scratch;
  return upload_step_inputs(kernels, arena, batch, scratch);
}

}  // namespace rill
