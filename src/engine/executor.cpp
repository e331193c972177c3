// engine/executor.cpp — see executor.h.
#include "engine/executor.h"

#include <span>

#include "core/error.h"

namespace rill {

Executor::Executor(Model& model, KvCache& kv, bool stateful)
    : model_(model), kv_(kv), stateful_(stateful), sampler_(model.kernels()), builder_(kv.block_size()) {}

void Executor::launch(const StepPlan& plan, StepResult& result) {
  kv_.copy_blocks(plan.copies);
  // Rows that feed a draw of the uncollected step first: their ids are the batch's first ids.
  order_.clear();
  feed_index_.clear();
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const ScheduledRow& row = plan.rows[i];
    const Sequence& seq = *row.seq;
    if (seq.tokens[size_t(row.start)] != kPendingToken) continue;
    RILL_CHECK(row.num_tokens == 1 && row.start + 1 == seq.length() && seq.pending_draw >= 0,
               "sequence {}: its pending token must be a row of its own (start {}, {} tokens, length {})", seq.id,
               row.start, row.num_tokens, seq.length());
    order_.push_back(i);
    feed_index_.push_back(seq.pending_draw);
  }
  const size_t fed = order_.size();
  for (size_t i = 0; i < plan.rows.size(); ++i)
    if (plan.rows[i].seq->tokens[size_t(plan.rows[i].start)] != kPendingToken) order_.push_back(i);

  // The builder lives across steps: its vectors keep their capacity, so a step allocates nothing.
  builder_.reset();
  static constexpr int32_t kFedPlaceholder = 0;  // replaced on the device before the embedding reads it
  for (size_t k = 0; k < order_.size(); ++k) {
    const ScheduledRow& row = plan.rows[order_[k]];
    std::span<const int32_t> tokens(row.seq->tokens.data() + row.start, size_t(row.num_tokens));
    if (k < fed) tokens = std::span<const int32_t>(&kFedPlaceholder, 1);
    const auto [lo, hi] = row.seq->scored_targets(row.start, row.num_tokens);
    // A row that scores prompt tokens, or verifies drafts, needs the logits of all its positions.
    builder_.add_row(tokens, row.start, row.seq->table.blocks,
                     lo < hi || row.seq->num_drafts > 0 ? Logits::all
                     : row.sample                       ? Logits::last
                                                        : Logits::none);
    if (stateful_) builder_.state_slot(row.seq->slot);
  }
  Tensor fed_ids;  // the fed rows' ids: their sequences' pending draws
  if (fed > 0) {
    Kernels& k = model_.kernels();
    const Tensor drawn = sampler_.last_tokens();
    for (int32_t d : feed_index_)
      RILL_CHECK(d < drawn.numel(), "a pending draw {} past the {} draws of the previous step", d, drawn.numel());
    const size_t bytes = fed * sizeof(int32_t);
    if (feed_ids_.size() < bytes) {
      feed_index_dev_ = Buffer(k.allocator(), std::max<size_t>(bytes * 2, 256));
      feed_ids_ = Buffer(k.allocator(), std::max<size_t>(bytes * 2, 256));
    }
    Tensor index = feed_index_dev_.as(DType::i32, {int64_t(fed)});
    k.upload(feed_index_.data(), index);
    Tensor ids = feed_ids_.as(DType::i32, {int64_t(fed), 1});
    k.gather_rows(drawn.view({drawn.numel(), 1}), index, ids);
    fed_ids = ids.view({int64_t(fed)});
    builder_.tokens_from(fed_ids);
  }
  const StepBatch& batch = builder_.finish();
  Tensor logits = model_.forward(batch, kv_.layers());

  sample_rows_.clear();
  result.first.assign(plan.rows.size(), -1);
  result.scores.assign(plan.rows.size(), StepResult::Scores{});
  result.tokens.clear();
  int32_t logit_row = 0;
  for (size_t k = 0; k < order_.size(); ++k) {
    const size_t i = order_[k];
    const ScheduledRow& row = plan.rows[i];
    const Sequence& seq = *row.seq;
    const RequestState& req = *seq.request;
    // A scoring row has the logits of all its tokens: position p scores prompt token p + 1.
    const auto [lo, hi] = seq.scored_targets(row.start, row.num_tokens);
    if (lo < hi) {
      result.scores[i] = {int32_t(sample_rows_.size()), lo, hi - lo};
      for (int32_t t = lo; t < hi; ++t) {
        SampleRow s;
        s.params = &req.request.sampling;
        s.logit_row = logit_row + (t - 1 - row.start);
        s.score_token = seq.tokens[size_t(t)];
        sample_rows_.push_back(s);
      }
      logit_row += row.num_tokens - (row.sample ? 1 : 0);  // the last position's logits, if drawn from, below
    }
    if (!row.sample) continue;
    result.first[i] = int32_t(sample_rows_.size());
    if (seq.num_drafts > 0) {
      // A draw at every position, each as the decode step of that position would make it: the
      // output index it draws (the noise key), and the penalties' counts with the drafts before it
      // taken as the sequence's tokens (the only case in which that draw is kept).
      const int32_t drafts = seq.num_drafts, base = seq.num_output() - drafts;
      const int32_t first_draw = logit_row + row.num_tokens - drafts - 1;  // at the last real token
      const int32_t* draft = seq.tokens.data() + (seq.length() - drafts);
      for (int32_t j = 0; j <= drafts; ++j) {
        SampleRow s;
        s.params = &req.request.sampling;
        s.seed = seq.seed;
        s.step = uint64_t(base + j);
        s.logit_row = first_draw + j;
        s.adjust = req.uses_adjust ? &seq.adjust : nullptr;
        s.counted = std::span<const int32_t>(draft, size_t(j));
        sample_rows_.push_back(s);
      }
      logit_row += row.num_tokens;
      continue;
    }
    const int32_t draws = seq.awaiting_fork ? req.request.sampling.n : 1;
    for (int32_t d = 0; d < draws; ++d) {
      SampleRow s;
      s.params = &req.request.sampling;
      s.seed = seq.awaiting_fork ? sequence_seed(req.seed, d) : seq.seed;
      s.step = uint64_t(seq.num_output());
      s.logit_row = logit_row;
      s.adjust = req.uses_adjust ? &seq.adjust : nullptr;
      // A fed row's draw is not in the adjust table yet (the host has not read it): its penalties
      // take it from the fed ids on the device.
      if (req.uses_adjust && k < fed) s.pending = int32_t(k);
      sample_rows_.push_back(s);
    }
    ++logit_row;
  }
  RILL_CHECK(logit_row == int32_t(batch.logit_indices.size()), "logits rows {} != sampling rows {}",
             batch.logit_indices.size(), logit_row);
  sampler_.launch(logits, sample_rows_, fed_ids);
}

void Executor::collect(StepResult& result) { sampler_.collect(result.tokens); }

}  // namespace rill
