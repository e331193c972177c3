// engine/engine.h — Engine: the public serving API. submit() validates a request, refuses it with
// a typed reason when it can never run or the queue is full, and returns a stream of TokenEvents;
// cancel() ends it; stats() reads the metrics. The engine runs on its own thread, which owns all
// engine state (EngineCore); callers reach it only through the submission queue (one mutex) and
// their per-request streams. Many requests share each step; a request's tokens are exactly the
// ones it would get alone (see docs/engine.md on batch invariance).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine_core.h"

namespace rill {

class Engine {
 public:
  /// Borrows `model` (it must outlive the engine). Sizes the KV cache and starts the thread.
  Engine(Model& model, const EngineOptions& options = {});
  /// Owns the backend and the model.
  Engine(std::unique_ptr<Kernels> kernels, std::unique_ptr<Model> model, const EngineOptions& options = {});
  /// Stops the thread; live requests end with FinishReason::cancelled.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Throws rill::Error (naming the field) on a malformed request; returns a refusal for a
  /// request that can never fit (too_long) or when max_waiting requests are queued (queue_full).
  Submission submit(Request request);
  /// Ends the request (no effect once it finished). Its stream gets a `cancelled` end event.
  void cancel(const RequestHandle& handle);
  /// A snapshot of the metrics as of the last step.
  EngineStats stats() const;
  /// Blocks until no request is queued or running (tests, benchmarks).
  void wait_idle();

  int32_t max_model_len() const { return core_->max_model_len(); }
  Model& model() { return *model_; }

 private:
  void run();
  void publish_stats_locked();
  std::string activity_due_locked();  ///< the activity line when one is due, else empty

  std::unique_ptr<Kernels> owned_kernels_;
  std::unique_ptr<Model> owned_model_;
  Model* model_;
  std::unique_ptr<EngineCore> core_;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable wake_, idle_;
  struct Submitted {
    Request request;
    RequestHandle stream;
    Clock::time_point time;
  };
  std::deque<Submitted> inbox_;
  std::vector<uint64_t> cancels_;
  int32_t queued_ = 0;  // submitted and not yet taken by the scheduler into a step
  bool stop_ = false;
  bool busy_ = false;
  uint64_t next_id_ = 1;
  EngineStats stats_;
  int64_t rejected_ = 0;
  // The activity log (EngineOptions::log_stats_interval_s): the window since the last line.
  double log_interval_s_ = 0;
  bool window_open_ = false;
  Clock::time_point window_start_;
  EngineStats window_stats_;
  std::thread thread_;
};

}  // namespace rill
