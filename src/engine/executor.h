// engine/executor.h — Executor: runs one planned step on the model. Copies the planned
// copy-on-write blocks, lays the rows out as a StepBatch, runs the forward, and draws the next
// token of every sampling row (n of them for a request that forks its prompt into n sequences,
// all reading the same logits row), draws a token at every position of a row that verifies drafts
// (speculative decoding: the draws the one-token steps of those positions would make), and scores
// the prompt tokens of rows that want prompt logprobs
// (a row that scores gets the logits of all its tokens). It changes no sequence state: EngineCore
// commits the results.
//
// launch() queues the step and returns without waiting for the device; collect() reads its draws.
// A row may feed the token its sequence drew in the step still uncollected (the sequence's last
// token is kPendingToken, Sequence::pending_draw its draw there): those rows go first in the
// batch and their ids are gathered on the device from that step's draws (StepBatch::token_source),
// so the next step is queued before the host has read the previous one's ids.
#pragma once

#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace rill {

/// The draws of one step, in plan order: for each sampling row, one token per sequence it feeds
/// (n for a row whose sequence awaits its fork, else 1).
struct StepResult {
  std::vector<SampledToken> tokens;
  std::vector<int32_t> first;  ///< per plan row: index of its first draw in tokens, -1 if none
  /// Per plan row: the prompt tokens it scores (SamplingParams::prompt_logprobs), prompt indices
  /// [target, target + count), their results at tokens[first, first + count); count 0 if none.
  struct Scores {
    int32_t first = -1, target = 0, count = 0;
  };
  std::vector<Scores> scores;
};

class Executor {
 public:
  /// `stateful`: the model keeps recurrent state; each row passes its sequence's state slot.
  Executor(Model& model, KvCache& kv, bool stateful);
  /// Queues `plan` (at most one earlier launch uncollected); fills result.first.
  void launch(const StepPlan& plan, StepResult& result);
  /// Waits for the oldest uncollected launch's draws; fills result.tokens.
  void collect(StepResult& result);
  /// Forgets uncollected launches (after a failed step).
  void abandon() { sampler_.abandon(); }

 private:
  Model& model_;
  KvCache& kv_;
  bool stateful_;
  Sampler sampler_;
  StepBatchBuilder builder_;
  std::vector<SampleRow> sample_rows_;
  std::vector<size_t> order_;        // plan rows in batch order: the rows fed on the device first
  std::vector<int32_t> feed_index_;  // per fed row: its sequence's draw in the previous launch
  Buffer feed_index_dev_, feed_ids_;
};

}  // namespace rill
