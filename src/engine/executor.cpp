// engine/executor.cpp — see executor.h.
#include "engine/executor.h"

#include <span>

#include "core/error.h"

namespace rill {

Executor::Executor(Model& model, KvCache& kv, bool stateful)
    : model_(model), kv_(kv), stateful_(stateful), sampler_(model.kernels()), builder_(kv.block_size()) {}

void Executor::run(const StepPlan& plan, StepResult& result) {
  kv_.copy_blocks(plan.copies);
  // The builder lives across steps: its vectors keep their capacity, so a step allocates nothing.
  builder_.reset();
  for (const ScheduledRow& row : plan.rows) {
    std::span<const int32_t> tokens(row.seq->tokens.data() + row.start, size_t(row.num_tokens));
    builder_.add_row(tokens, row.start, row.seq->table.blocks, row.sample ? Logits::last : Logits::none);
    if (stateful_) builder_.state_slot(row.seq->slot);
  }
  const StepBatch& batch = builder_.finish();
  Tensor logits = model_.forward(batch, kv_.layers());

  sample_rows_.clear();
  result.first.assign(plan.rows.size(), -1);
  int32_t logit_row = 0;
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const ScheduledRow& row = plan.rows[i];
    if (!row.sample) continue;
    const Sequence& seq = *row.seq;
    const RequestState& req = *seq.request;
    result.first[i] = int32_t(sample_rows_.size());
    const int32_t draws = seq.awaiting_fork ? req.request.sampling.n : 1;
    for (int32_t d = 0; d < draws; ++d) {
      SampleRow s;
      s.params = &req.request.sampling;
      s.seed = seq.awaiting_fork ? sequence_seed(req.seed, d) : seq.seed;
      s.step = uint64_t(seq.num_output());
      s.logit_row = logit_row;
      s.adjust = req.uses_adjust ? &seq.adjust : nullptr;
      sample_rows_.push_back(s);
    }
    ++logit_row;
  }
  RILL_CHECK(logit_row == int32_t(batch.logit_indices.size()), "logits rows {} != sampling rows {}",
             batch.logit_indices.size(), logit_row);
  sampler_.sample(logits, sample_rows_, result.tokens);
}

}  // namespace rill
