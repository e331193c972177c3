// engine/scheduler.h — Scheduler: which sequences get a row in the next step, and how many new
// tokens each. Continuous batching with chunked prefill under a per-step token budget: running
// sequences first (decode rows, then prefill chunks, in arrival order), then waiting ones in
// FCFS order. When the KV pool runs dry the lowest-priority running sequence (the last in the
// running list) is preempted by recompute: its blocks are freed and it rejoins the front of the
// waiting queue with its tokens so far as its new prompt. Invariant: a sequence is in exactly one
// of running_ and waiting_ until it finishes; every running sequence's table covers num_computed.
//
// Hybrid models (StatePool enabled): a sequence is admitted only with a free state slot (n slots
// for a request that forks after its prompt); preemption and removal release them. A prefix hit is
// cut back to the longest matched block boundary that has a state snapshot, which is restored into
// the slot. Prefill chunks end exactly at snapshot boundaries (every snapshot_interval_blocks
// blocks, and the prompt's last block boundary before its last token) so that the state at each
// boundary exists after the step that reaches it; EngineCore saves it there.
//
// Speculative decoding (SchedulerOptions::drafts): the row of a sequence that may speculate and has
// at most kMaxRecurrentDrafts tokens to compute (its last token; the kept tokens after a hybrid
// model's rollback; a prompt's last chunk) gets up to spec_tokens drafted tokens after them, when
// the step's token budget and the free blocks allow them without preempting anything; the drafts go
// at the end of its tokens (Sequence::num_drafts) and the row covers them. A sequence may speculate
// when it is not scoring its prompt, forking or waiting for a pending draw, and at most
// spec_max_running sequences run (at larger batches the step is no longer bound by the weights'
// bytes, and drafts cost their compute).
// A hybrid model's row also needs a free state slot that the next waiting sequence does not need,
// where its state from before the row is copied (EngineCore restores it when a draft is rejected),
// holds at most kMaxRecurrentDrafts + 1 tokens (rows of up to 16 tokens run the recurrence token by
// token, as decode does), and ends at the next snapshot boundary.
//
// Sessions (SessionPins, optional): pinned blocks are the first to go when blocks run short — the
// least recently used session is unpinned before any running sequence is preempted or a waiting
// one is held back; a sequence of a session drops its session's old pin once admitted.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/sequence.h"
#include "engine/session.h"
#include "engine/spec/draft_source.h"
#include "engine/state_pool.h"

namespace rill {

struct SchedulerOptions {
  int32_t max_num_seqs = 256;             ///< rows per step
  int32_t max_num_batched_tokens = 2048;  ///< new tokens per step (decode rows + prefill chunks)
  /// Blocks kept free when admitting a new sequence while others run (fewer immediate preemptions).
  int32_t watermark_blocks = 0;
  /// Hybrid models: a state snapshot every this many blocks (besides the prompt's last boundary).
  int32_t snapshot_interval_blocks = 128;
  /// Prompt tokens a step computes for sequences that score their prompt (prompt logprobs): each
  /// such token's logits are kept and scored ([tokens, vocab] of logits and of sampling workspace).
  int32_t max_scored_tokens = 256;
  // ---- Speculative decoding (off while drafts is null or spec_tokens is 0).
  DraftSource* drafts = nullptr;
  int32_t spec_tokens = 0;         ///< drafted tokens a row at most
  int32_t spec_max_running = 32;   ///< no drafts while more sequences run
  int32_t max_model_len = INT32_MAX;  ///< a sequence's drafts and its next draw stay within it
};

/// One row of the next step: tokens [start, start + num_tokens) of `seq`.
struct ScheduledRow {
  Sequence* seq;
  int32_t start;
  int32_t num_tokens;
  bool sample;  ///< the row ends at the sequence's last token: draw its next token
};

struct StepPlan {
  std::vector<ScheduledRow> rows;
  std::vector<BlockCopy> copies;  ///< copy-on-write, to run before the forward
  std::vector<Sequence*> preempted;
  std::vector<Sequence*> admitted;  ///< left the waiting queue this step
  int32_t num_tokens = 0;
  bool empty() const { return rows.empty(); }
};

class Scheduler {
 public:
  /// Drafts a hybrid model's row carries at most (16-token rows run the recurrence token by token),
  /// and the most uncomputed tokens a row with drafts may hold.
  static constexpr int32_t kMaxRecurrentDrafts = 15;

  /// `states`/`snapshots` may be disabled (models without recurrent state, no snapshot budget).
  Scheduler(KvCache& kv, StatePool& states, StateSnapshots& snapshots, const SchedulerOptions& options,
            SessionPins* sessions = nullptr);

  /// Queues a sequence at the back (a new request) of the waiting queue.
  void enqueue(Sequence* seq);
  /// Adds a sequence that already holds its blocks (a fork) to the running list.
  void add_running(Sequence* seq);
  /// Removes a sequence from whichever list holds it and frees its blocks.
  void remove(Sequence* seq);
  /// Plans the next step (allocates the blocks it needs; preempts when they run out).
  StepPlan schedule();

  int32_t num_waiting() const { return int32_t(waiting_.size()); }
  int32_t num_running() const { return int32_t(running_.size()); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  uint64_t num_preemptions() const { return num_preemptions_; }
  /// Hybrid models: true when the state after the first `tokens` tokens of `seq` is to be kept as
  /// a snapshot (a block boundary every snapshot_interval_blocks, or the prompt's last boundary).
  bool is_snapshot_boundary(const Sequence& seq, int32_t tokens) const;

 private:
  bool schedule_running(Sequence* seq, int32_t& budget, StepPlan& plan);
  /// A chunk of `n` tokens cut to the step's scoring budget when `seq` scores its prompt.
  int32_t cut_for_scores(const Sequence& seq, int32_t n) const;
  void preempt(Sequence* seq, StepPlan& plan);
  bool admit(Sequence* seq, int32_t& budget, StepPlan& plan);
  /// Shortens a chunk [start, start + n) so that it does not run past the next snapshot boundary.
  int32_t cut_at_boundary(const Sequence& seq, int32_t start, int32_t n) const;
  /// Returns the sequence's state slots to the pool.
  void release_slots(Sequence* seq);
  /// State slots a waiting sequence needs to be admitted (n when it forks after its prompt).
  int32_t slots_to_admit(const Sequence& seq) const;
  /// Speculative decoding: tries a row of `seq`'s uncomputed tokens and drafts (at most `budget` tokens);
  /// false, with nothing changed, when there are no drafts or no blocks for them without preempting.
  bool schedule_drafts(Sequence* seq, int32_t& budget, StepPlan& plan);

  KvCache& kv_;
  StatePool& states_;
  StateSnapshots& snapshots_;
  SchedulerOptions options_;
  SessionPins* sessions_;
  std::vector<Sequence*> running_;
  std::deque<Sequence*> waiting_;
  uint64_t step_ = 0;
  uint64_t num_preemptions_ = 0;
  int32_t score_budget_ = 0;  // scored tokens left in the step being planned
  std::vector<int32_t> drafts_;  // scratch of schedule_drafts
  int32_t decode_left_ = 0;      // decode rows of the step being planned not yet given a row
};

}  // namespace rill
