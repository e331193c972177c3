// model/step_batch.h — StepBatch: one forward step's rows laid end to end (host side).
// Prompt chunks, decode tokens and verification blocks are all rows with some number of new
// tokens; the model does not distinguish them. Invariant: a row's block table covers its
// context_len tokens; slot_mapping[i] is the cache slot of new token i.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace rill {

struct StepBatch {
  int32_t block_size = 16;
  std::vector<int32_t> tokens;         ///< [T] new token ids of all rows, end to end
  std::vector<int32_t> positions;      ///< [T] absolute positions
  std::vector<int32_t> cu_seqlens;     ///< [rows + 1]
  std::vector<int32_t> context_lens;   ///< [rows] KV length after this step
  std::vector<int32_t> block_tables;   ///< [rows × max_blocks_per_row], padded with 0
  int32_t max_blocks_per_row = 0;
  std::vector<int32_t> slot_mapping;   ///< [T]
  std::vector<int32_t> logit_indices;  ///< indices into [T] whose logits forward() returns, in order
  /// Optional [rows]: recurrent-state slot id of each row (hybrid models, e.g. Qwen3.5). Empty: the
  /// model keys a row's state by its first block id. A row starting at position 0 resets its state.
  std::vector<int32_t> state_slots;
  /// Optional: an i32 device tensor whose n values replace the first n ids of `tokens` on the
  /// device (n = its element count ≤ num_tokens()), e.g. the ids the previous decode step picked,
  /// so the step can be queued before the host has read them. `tokens` still gives the count. The
  /// ids must lie in the vocabulary: unlike `tokens`, forward() cannot check them on the host.
  Tensor token_source;

  int32_t num_rows() const { return int32_t(context_lens.size()); }
  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t max_seqlen_q() const;
  int32_t max_context_len() const;
};

enum class Logits { none, last, all };

/// Builds a StepBatch row by row. Block tables are given per row; rows may differ in length.
/// A builder kept across steps (reset() then add rows, then finish()) reuses its vectors, so a
/// steady-state step allocates nothing on the host.
class StepBatchBuilder {
 public:
  explicit StepBatchBuilder(int32_t block_size) { batch_.block_size = block_size; }
  /// Adds a row whose `tokens` start at absolute position `start_pos` (its cache already holds
  /// start_pos tokens); `block_table` must cover start_pos + tokens.size() tokens.
  StepBatchBuilder& add_row(std::span<const int32_t> tokens, int32_t start_pos, std::span<const int32_t> block_table,
                            Logits logits);
  /// Sets the recurrent-state slot of the row added last (hybrid models).
  StepBatchBuilder& state_slot(int32_t slot);
  /// Sets the batch's token_source: the rows' ids come from `ids` on the device.
  StepBatchBuilder& tokens_from(Tensor ids);
  /// Pads the block tables to a rectangle and returns the batch, which stays owned by the builder
  /// (valid until the next reset()).
  const StepBatch& finish();
  /// Finishes and moves the batch out (the builder starts empty).
  StepBatch build();
  /// Drops every row, keeping the vectors' capacity.
  void reset();

 private:
  StepBatch batch_;
  std::vector<int32_t> tables_;       // every row's used blocks, end to end
  std::vector<int32_t> table_begin_;  // [rows + 1] offsets into tables_
};

}  // namespace rill
