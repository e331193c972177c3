// engine/engine.cpp — see engine.h. The thread loop: take the inbox and cancellations, run one
// step, publish stats (every few seconds also an activity line in the log); sleep when idle. A step
// that throws ends every live request with an error event (the KV state is released with them) and
// the engine keeps serving new requests.
#include "engine/engine.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace rill {
namespace {

double checked_log_interval(const EngineOptions& o) {
  if (!(o.log_stats_interval_s >= 0) || !std::isfinite(o.log_stats_interval_s))
    fail("log_stats_interval_s: must be a number of seconds >= 0 (0: no activity log), got {}", o.log_stats_interval_s);
  return o.log_stats_interval_s;
}

}  // namespace

Engine::Engine(Model& model, const EngineOptions& options)
    : model_(&model), core_(std::make_unique<EngineCore>(model, options)) {
  log_interval_s_ = checked_log_interval(options);
  stats_ = core_->stats();
  thread_ = std::thread([this] { run(); });
}

Engine::Engine(std::unique_ptr<Kernels> kernels, std::unique_ptr<Model> model, const EngineOptions& options)
    : owned_kernels_(std::move(kernels)), owned_model_(std::move(model)), model_(owned_model_.get()),
      core_(std::make_unique<EngineCore>(*model_, options)) {
  log_interval_s_ = checked_log_interval(options);
  stats_ = core_->stats();
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  core_.reset();
}

Submission Engine::submit(Request request) {
  core_->validate(request);  // const and reads immutable state only: safe off the engine thread
  Submission out;
  if ((out.reject = core_->admissible(request, out.message)) != RejectReason::none) {
    std::lock_guard lock(mutex_);
    ++rejected_;
    return out;
  }
  {
    std::lock_guard lock(mutex_);
    if (queued_ >= core_->options().max_waiting) {
      out.reject = RejectReason::queue_full;
      out.message = fmt::format("the engine's queue is full ({} requests waiting); retry later", queued_);
      ++rejected_;
      return out;
    }
    out.handle = std::make_shared<RequestStream>(next_id_++);
    inbox_.push_back({std::move(request), out.handle, Clock::now()});
    ++queued_;
  }
  wake_.notify_one();
  return out;
}

void Engine::cancel(const RequestHandle& handle) {
  if (!handle) return;
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(handle->id());
  }
  wake_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Engine::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return inbox_.empty() && cancels_.empty() && !busy_; });
}

void Engine::publish_stats_locked() {
  stats_ = core_->stats();
  stats_.requests_rejected = rejected_;
  queued_ = int32_t(inbox_.size()) + stats_.num_waiting;
  stats_.num_waiting = queued_;
}

// Every log_interval_s_ while there is work, and once when it runs out: what the engine did since the
// window opened (the first step after idling opens it, so an idle spell does not dilute the rates).
std::string Engine::activity_due_locked() {
  if (log_interval_s_ <= 0 || !window_open_) return {};
  const Clock::time_point now = Clock::now();
  const bool work = busy_ || !inbox_.empty();
  const double s = std::chrono::duration<double>(now - window_start_).count();
  if (s < log_interval_s_ && work) return {};
  std::string line = activity_line(window_stats_, stats_, s);
  window_open_ = work;
  window_start_ = now;
  window_stats_ = stats_;
  return line;
}

void Engine::run() {
  std::deque<Submitted> taken;
  std::vector<uint64_t> cancels;
  for (;;) {
    std::string activity;
    {
      std::lock_guard lock(mutex_);
      busy_ = core_->has_work();
      publish_stats_locked();
      activity = activity_due_locked();
    }
    if (!activity.empty()) logger().info("{}", activity);  // (not under the lock submitters take)
    {
      std::unique_lock lock(mutex_);
      if (!busy_ && inbox_.empty() && cancels_.empty()) idle_.notify_all();
      wake_.wait(lock, [&] { return stop_ || busy_ || !inbox_.empty() || !cancels_.empty(); });
      if (stop_) break;
      if (log_interval_s_ > 0 && !window_open_) {  // work after idling: the stats before it open the window
        window_open_ = true;
        window_start_ = Clock::now();
        window_stats_ = stats_;
      }
      taken.swap(inbox_);
      cancels.swap(cancels_);
      busy_ = true;
    }
    for (Submitted& s : taken) core_->add(std::move(s.request), std::move(s.stream), s.time);
    taken.clear();
    for (uint64_t id : cancels) core_->cancel(id);
    cancels.clear();
    try {
      core_->step();
    } catch (const std::exception& e) {
      logger().error("engine step failed: {}", e.what());
      core_->fail_all(fmt::format("engine step failed: {}", e.what()), FinishReason::error);
    }
  }
  core_->fail_all("the engine is shutting down", FinishReason::cancelled);
}

}  // namespace rill
