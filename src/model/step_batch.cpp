// model/step_batch.cpp — StepBatch construction and its host-side hints.
#include "model/step_batch.h"

#include <algorithm>

#include "core/error.h"

namespace rill {

int32_t StepBatch::max_seqlen_q() const {
  int32_t m = 0;
  for (size_t r = 0; r + 1 < cu_seqlens.size(); ++r) m = std::max(m, cu_seqlens[r + 1] - cu_seqlens[r]);
  return m;
}

int32_t StepBatch::max_context_len() const {
  int32_t m = 0;
  for (int32_t c : context_lens) m = std::max(m, c);
  return m;
}

StepBatchBuilder& StepBatchBuilder::add_row(std::span<const int32_t> tokens, int32_t start_pos,
                                            std::span<const int32_t> block_table, Logits logits) {
  const int32_t bs = batch_.block_size;
  const int32_t n = int32_t(tokens.size());
  const int32_t context = start_pos + n;
  RILL_CHECK(n > 0, "a row needs at least one new token");
  RILL_CHECK(int64_t(block_table.size()) * bs >= context, "block table of {} blocks cannot hold {} tokens",
             block_table.size(), context);
  if (batch_.cu_seqlens.empty()) batch_.cu_seqlens.push_back(0);
  const int32_t base = batch_.num_tokens();
  for (int32_t i = 0; i < n; ++i) {
    int32_t pos = start_pos + i;
    batch_.tokens.push_back(tokens[size_t(i)]);
    batch_.positions.push_back(pos);
    batch_.slot_mapping.push_back(block_table[size_t(pos / bs)] * bs + pos % bs);
    if (logits == Logits::all || (logits == Logits::last && i == n - 1)) batch_.logit_indices.push_back(base + i);
  }
  batch_.cu_seqlens.push_back(base + n);
  batch_.context_lens.push_back(context);
  int32_t used_blocks = (context + bs - 1) / bs;
  tables_.emplace_back(block_table.begin(), block_table.begin() + used_blocks);
  return *this;
}

StepBatch StepBatchBuilder::build() {
  int32_t width = 1;
  for (auto& t : tables_) width = std::max(width, int32_t(t.size()));
  batch_.max_blocks_per_row = width;
  batch_.block_tables.assign(tables_.size() * size_t(width), 0);
  for (size_t r = 0; r < tables_.size(); ++r)
    std::copy(tables_[r].begin(), tables_[r].end(), batch_.block_tables.begin() + r * size_t(width));
  StepBatch out = std::move(batch_);
  batch_ = StepBatch{};
  batch_.block_size = out.block_size;
  tables_.clear();
  return out;
}

}  // namespace rill
