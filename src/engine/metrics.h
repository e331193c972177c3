// engine/metrics.h — what the engine measures for the server's /metrics and for benchmarks:
// queue depth, running rows, KV blocks, prefix-cache hits, token counts, and latency summaries
// (time to first token, inter-token time) over a window of recent samples. Written by the engine
// thread; EngineStats is a plain snapshot copied out under the engine's queue lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rill {

struct LatencySummary {
  int64_t count = 0;  ///< samples ever recorded
  double mean_s = 0, p50_s = 0, p99_s = 0, max_s = 0;  ///< over the window
};

/// The last `capacity` samples of one latency (a ring; no allocation after construction).
class LatencyWindow {
 public:
  explicit LatencyWindow(size_t capacity = 8192) : samples_(capacity, 0.0) {}
  void add(double seconds);
  LatencySummary summary() const;
  void clear();

 private:
  std::vector<double> samples_;
  size_t next_ = 0;
  int64_t count_ = 0;
};

struct EngineStats {
  int32_t num_waiting = 0;  ///< requests queued (submitted, not yet running), incl. preempted sequences
  int32_t num_running = 0;  ///< sequences holding KV
  int32_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_free = 0;
  int32_t kv_blocks_cached = 0;  ///< free but still holding prefix-cache entries (evictable)
  int32_t block_size = 0;
  int64_t prompt_tokens = 0;      ///< admitted prompt tokens (first admission)
  int64_t prefix_hit_tokens = 0;  ///< of those, served from the prefix cache
  int64_t computed_tokens = 0;    ///< tokens run through the model (prefill + decode + recompute)
  int64_t generated_tokens = 0;
  int64_t requests_finished = 0, requests_cancelled = 0, requests_rejected = 0;
  int64_t num_preemptions = 0, num_steps = 0;
  int64_t steps_overlapped = 0;  ///< steps launched before the previous step's ids were read
  // Speculative decoding: rows that verified drafts, the drafts they carried, and those kept.
  int64_t spec_verify_rows = 0, spec_drafted_tokens = 0, spec_accepted_tokens = 0;
  // Hybrid models: recurrent-state slots and the prefix cache's state snapshots.
  int32_t state_slots_total = 0, state_slots_used = 0;
  int32_t state_snapshots = 0;              ///< stored now
  int64_t state_snapshot_bytes = 0;         ///< device memory they hold
  int64_t state_snapshot_budget_bytes = 0;  ///< their bound
  int64_t state_snapshots_saved = 0, state_snapshots_evicted = 0;
  // Sessions: pins of their last prompt boundary.
  int32_t sessions_pinned = 0;
  int32_t session_blocks_pinned = 0;          ///< distinct KV blocks held by session pins
  int64_t sessions_unpinned_for_space = 0;    ///< pins dropped for max_sessions, the cap or block pressure
  LatencySummary ttft, itl;
};

/// What the engine did between two snapshots `seconds` apart, as one log line: rows running and waiting,
/// prompt and generation tokens/s, the KV blocks in use and those the prefix cache keeps, the prefix
/// cache's share of the window's prompt tokens, and preemptions (rill serve logs it every few seconds
/// while there is work).
std::string activity_line(const EngineStats& before, const EngineStats& now, double seconds);

}  // namespace rill
