// engine/executor.h — Executor: runs one planned step on the model. Copies the planned
// copy-on-write blocks, lays the rows out as a StepBatch, runs the forward, and draws the next
// token of every sampling row (n of them for a request that forks its prompt into n sequences,
// all reading the same logits row). It changes no sequence state: EngineCore commits the results.
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
};

class Executor {
 public:
  /// `stateful`: the model keeps recurrent state; each row passes its sequence's state slot.
  Executor(Model& model, KvCache& kv, bool stateful);
  void run(const StepPlan& plan, StepResult& result);

 private:
  Model& model_;
  KvCache& kv_;
  bool stateful_;
  Sampler sampler_;
  StepBatchBuilder builder_;
  std::vector<SampleRow> sample_rows_;
};

}  // namespace rill
