// model/step_batch.cpp — StepBatch construction and its host-side hints.
#include "model/step_batch.h"

#include <algorithm>
#include <utility>

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
  if (table_begin_.empty()) table_begin_.push_back(0);
  tables_.insert(tables_.end(), block_table.begin(), block_table.begin() + used_blocks);
  table_begin_.push_back(int32_t(tables_.size()));
  return *this;
}

StepBatchBuilder& StepBatchBuilder::state_slot(int32_t slot) {
  RILL_CHECK(int32_t(batch_.state_slots.size()) + 1 == batch_.num_rows(), "state_slot() follows its row's add_row()");
  batch_.state_slots.push_back(slot);
  return *this;
}

StepBatchBuilder& StepBatchBuilder::tokens_from(Tensor ids) {
  batch_.token_source = std::move(ids);
  return *this;
}

void StepBatchBuilder::reset() {
  const int32_t bs = batch_.block_size;
  batch_.tokens.clear();
  batch_.positions.clear();
  batch_.cu_seqlens.clear();
  batch_.context_lens.clear();
  batch_.block_tables.clear();
  batch_.slot_mapping.clear();
  batch_.logit_indices.clear();
  batch_.state_slots.clear();
  batch_.token_source = Tensor();
  batch_.max_blocks_per_row = 0;
  batch_.block_size = bs;
  tables_.clear();
  table_begin_.clear();
}

const StepBatch& StepBatchBuilder::finish() {
  const size_t rows = table_begin_.empty() ? 0 : table_begin_.size() - 1;
  int32_t width = 1;
  for (size_t r = 0; r < rows; ++r) width = std::max(width, table_begin_[r + 1] - table_begin_[r]);
  batch_.max_blocks_per_row = width;
  batch_.block_tables.assign(rows * size_t(width), 0);
  for (size_t r = 0; r < rows; ++r)
    std::copy(tables_.begin() + table_begin_[r], tables_.begin() + table_begin_[r + 1],
              batch_.block_tables.begin() + std::ptrdiff_t(r * size_t(width)));
  return batch_;
}

StepBatch StepBatchBuilder::build() {
  finish();
  StepBatch out = std::move(batch_);
  batch_ = StepBatch{};
  batch_.block_size = out.block_size;
  tables_.clear();
  table_begin_.clear();
  return out;
}

}  // namespace rill
