// engine/engine_core.h — EngineCore: the engine's state machine on one thread. It owns the KV
// cache, the state pool, the scheduler and the executor (the model is borrowed), validates and
// admits requests, and advances every live request by one step() at a time: schedule, run,
// commit, publish events. No locks: Engine (engine.h) calls it from its own thread, and tests
// drive it directly for deterministic step-by-step checks.
//
// Overlapped steps (EngineOptions::overlap_steps): step k is launched before step k - 1's draws
// are read. Each drawing row of k - 1 left a kPendingToken at its sequence's end, so k schedules
// it as a decode row whose id the executor gathers on the device; then k - 1's draws are read
// and published (the host's read, events and bookkeeping run while the device computes k). Only
// steps of one-token rows are launched that way: a step with prompt chunks queues hundreds of
// launches that can wait for queue space behind k - 1, so k - 1 is read first (its events would
// otherwise wait for that). The cost is one step late: a sequence that drew a stop token in k - 1
// also ran a row in k (its draw dropped, its blocks freed when k - 1 is read, its request kept
// alive until k is read). Penalties count a pending draw on the device (SamplingRowParams::pending).
// A step whose draws feed a fork (n > 1) is read right after its launch. Hybrid models overlap too
// (a step's state writes and snapshot copies are queued before the next step); models whose
// forward waits for the device (host MoE routing) do not, unless asked. Outputs are the same bits
// either way: the same rows see the same ids and positions.
//
// Speculative decoding (EngineOptions::speculative_tokens): the scheduler puts a draft source's
// guesses after a row's last token (Sequence::num_drafts), the row's forward computes every
// position, and the sampler draws at each one exactly as the one-token step of that position would
// (the same logits, since the kernels do not depend on a row's length or batch; the same noise key,
// the output index; the penalties counting the drafts before it). The drafts are kept up to the first
// that differs from its draw, that draw is kept too, and the rest is rolled back: their tokens are
// dropped, num_computed stops after the last kept draft (the K/V written past it is overwritten by
// later steps before anything reads it, and no block holding it is offered to the prefix cache), and
// blocks past the sequence's length go back to the pool; a hybrid model's state comes back from the
// copy the scheduler made before the row, and the next row computes the kept tokens again. So the
// tokens, logprobs and finish reasons are those of decoding without drafts, bit for bit; a step makes
// 1 to 1 + drafts tokens a sequence.
// While sequences may speculate (at most speculative_max_running run), each step is read right after
// its launch: the next step's drafts need its tokens. Above that, steps overlap as without drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/executor.h"
#include "engine/kv/kv_cache.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/session.h"
#include "engine/spec/ngram.h"
#include "engine/state_pool.h"
#include "model/model.h"

namespace rill {

struct EngineOptions {
  /// KV cache size in bytes; 0: a share of free device memory (CUDA, measured after a warm-up
  /// step) or min(25% of MemAvailable, 4 GiB) on the CPU.
  size_t kv_memory_bytes = 0;
  double kv_memory_fraction = 0.85;  ///< share of free device memory when kv_memory_bytes is 0 (CUDA)
  int32_t block_size = 16;
  int32_t max_num_seqs = 256;             ///< rows per step
  int32_t max_num_batched_tokens = 2048;  ///< new tokens per step
  int32_t max_waiting = 1024;             ///< queued requests before submit() answers queue_full
  int32_t max_model_len = 0;              ///< 0: the model's max_position_embeddings
  int32_t max_n = 64;                     ///< largest SamplingParams::n accepted
  /// Prompt tokens a step scores for prompt logprobs (SamplingParams::prompt_logprobs): their
  /// logits and sampling workspace ([tokens, vocab]) are the step's; longer prompts take more steps.
  int32_t max_scored_tokens = 256;
  bool prefix_caching = true;
  /// Part of every prefix-cache namespace; empty: derived from the model's config.
  std::string model_identity;
  /// RILL_CHECK the KV invariants after every step (tests; costs O(blocks) per step).
  bool check_invariants = false;
  /// While there is work, log an activity line (engine/metrics.h) every this many seconds, and once when
  /// the work runs out; 0: never (the library's default; rill serve logs every 10 s).
  double log_stats_interval_s = 0;
  /// Launch each decode step before reading the previous one's draws (see above). automatic: on
  /// where the device runs ops asynchronously (CUDA); the CPU backend computes a step inside its
  /// launch, where overlap would only publish every token one step late.
  enum class Overlap { automatic, on, off } overlap_steps = Overlap::automatic;
  // ---- Hybrid models (recurrent state; ignored for models without it).
  /// State slots, i.e. sequences that can run at once; 0: max_num_seqs.
  int32_t max_state_slots = 0;
  /// Memory for prefix-cache state snapshots, taken out of the KV budget; 0: state_snapshot_fraction
  /// of the KV budget.
  size_t state_snapshot_bytes = 0;
  double state_snapshot_fraction = 0.1;  ///< 0 (with state_snapshot_bytes 0): no snapshots
  /// A snapshot every this many blocks along a prompt (and always at its last block boundary);
  /// 0: max_num_batched_tokens / block_size, so that whole prefill chunks end on boundaries.
  int32_t snapshot_interval_blocks = 0;
  // ---- Sessions (Request::session_id; engine/session.h). Need prefix caching.
  /// Sessions whose last prompt boundary stays pinned (LRU over sessions); 0: no pinning.
  int32_t max_sessions = 64;
  /// Share of the KV blocks that session pins may hold; the pool unpins before it preempts.
  double session_pinned_fraction = 0.5;
  // ---- Speculative decoding (engine/spec/; see EngineCore).
  /// Tokens drafted for a row at most (a hybrid model's row: at most 15); 0: off.
  int32_t speculative_tokens = 0;
  /// No drafts while more sequences than this run.
  int32_t speculative_max_running = 32;
  /// The n-gram lookup that drafts when draft_source is null.
  NgramOptions ngram;
  /// Another draft source (tests, embedders); null: NgramDraftSource(ngram).
  std::shared_ptr<DraftSource> draft_source;
};

/// How the engine's cache memory is split: KV blocks, and bytes for state snapshots.
struct MemoryPlan {
  int32_t kv_blocks = 0;
  size_t snapshot_bytes = 0;
};

class EngineCore {
 public:
  EngineCore(Model& model, const EngineOptions& options);
  ~EngineCore();

  /// Throws rill::Error naming the field when the request is malformed (ids outside the
  /// vocabulary, a sampling value out of range).
  void validate(const Request& request) const;
  /// Refusal of a well-formed request that can never run (too long for the context or for the
  /// whole KV cache); RejectReason::none when it can.
  RejectReason admissible(const Request& request, std::string& message) const;
  /// Queues a validated, admissible request; its events go to `stream`.
  void add(Request request, RequestHandle stream, Clock::time_point submitted);
  /// Ends a request wherever it is (frees its blocks); its stream gets a `cancelled` end.
  void cancel(uint64_t request_id);
  /// Ends every live request with an error event (after a failed step, or at shutdown).
  void fail_all(const std::string& message, FinishReason reason);

  bool has_work() const { return !scheduler_.idle() || inflight_.has_value(); }
  /// One iteration: schedule, forward, sample, commit, publish. Returns false when idle.
  bool step();

  int32_t num_live_requests() const { return int32_t(requests_.size()); }
  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  int32_t max_model_len() const { return max_model_len_; }
  KvCache& kv_cache() { return *kv_; }
  const Scheduler& scheduler() const { return scheduler_; }
  const StatePool& state_pool() const { return state_pool_; }
  const StateSnapshots& snapshots() const { return snapshots_; }
  const SessionPins& sessions() const { return sessions_; }
  /// RILL_CHECKs the KV invariants against every live sequence's table.
  void check_invariants() const;
  /// Whether steps overlap (the option, on a model that takes device-fed ids and has no state).
  bool overlaps_steps() const { return overlap_; }

 private:
  struct InFlight {
    StepPlan plan;
    StepResult result;
  };
  /// Whether the next step may be scheduled before `f`'s draws are read: none feeds a fork, which
  /// is made on the host, and no sequence may draft from them (else f is read right after its launch).
  bool may_overlap(const InFlight& f) const;
  /// After a launch: the rows' computed tokens (KV commit, snapshots, counters) and each drawing
  /// row's pending token. Rows of sequences that ended meanwhile are skipped.
  void advance(const StepPlan& plan, const StepResult& result);
  /// Reads the in-flight step's draws and publishes them: forks, events, finishes.
  void settle();
  void commit_draws(const StepPlan& plan, StepResult& result);
  void emit(Sequence& seq, const SampledToken& drawn, Clock::time_point now);
  /// A verifying row's draws (draws[first, first + drafts]; the row began at token row_start): keeps
  /// the drafts up to the first that differs from its draw, emits the draws, rolls the rest back.
  void commit_drafts(Sequence& seq, int32_t row_start, const std::vector<SampledToken>& draws, int32_t first,
                     Clock::time_point now);
  void finish_sequence(Sequence& seq, FinishReason reason, TokenEvent& event);
  Sequence* fork(Sequence& parent, int32_t index);
  /// Drops the snapshots of prefixes whose blocks left the prefix cache.
  void drop_evicted_snapshots();
  /// Keeps the state of `seq` (just computed up to num_computed) as the snapshot of its prefix.
  void save_snapshot(Sequence& seq);
  /// A request of a session ends: its first sequence's cached full blocks become the session's pin.
  void pin_session(const Sequence& seq);

  Model& model_;
  EngineOptions options_;
  int32_t max_model_len_ = 0;
  int64_t vocab_size_ = 0;
  std::string ns_prefix_;
  StatePool state_pool_;
  MemoryPlan memory_;
  std::unique_ptr<KvCache> kv_;
  StateSnapshots snapshots_;
  SessionPins sessions_;  // before scheduler_, after kv_ and snapshots_ (its destructor unpins)
  std::shared_ptr<DraftSource> drafts_;  // before scheduler_, which borrows it; null: no speculation
  Scheduler scheduler_;
  Executor executor_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests_;
  std::vector<int32_t> drafted_;  // commit_drafts' scratch
  uint64_t next_sequence_id_ = 0;
  bool overlap_ = false;
  std::optional<InFlight> inflight_;
  // Finished requests kept alive while a launched step may still name their sequences: those
  // retired by the current settle, and by the one before it (freed at the end of the next).
  std::vector<std::unique_ptr<RequestState>> retired_, retired_before_;
  // Metrics (engine thread only).
  EngineStats counters_;
  LatencyWindow ttft_, itl_;
};

/// The memory split for `options` on this model's device (resolves kv_memory_bytes = 0); a hybrid
/// model's `state_slots` must already be reserved (they count as used memory on CUDA).
MemoryPlan plan_memory(Model& model, const EngineOptions& options, int32_t state_slots);
/// KV blocks for `options` on this model's device (resolves kv_memory_bytes = 0).
int32_t kv_blocks_for(Model& model, const EngineOptions& options);

}  // namespace rill
