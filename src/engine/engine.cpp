// engine/engine.cpp — see engine.h. The thread loop: take the inbox and cancellations, run one
// step, publish stats; sleep when idle. A step that throws ends every live request with an error
// event (the KV state is released with them) and the engine keeps serving new requests.
#include "engine/engine.h"

#include "core/error.h"
#include "core/log.h"

namespace rill {

Engine::Engine(Model& model, const EngineOptions& options)
    : model_(&model), core_(std::make_unique<EngineCore>(model, options)) {
  stats_ = core_->stats();
  thread_ = std::thread([this] { run(); });
}

Engine::Engine(std::unique_ptr<Kernels> kernels, std::unique_ptr<Model> model, const EngineOptions& options)
    : owned_kernels_(std::move(kernels)), owned_model_(std::move(model)), model_(owned_model_.get()),
      core_(std::make_unique<EngineCore>(*model_, options)) {
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

void Engine::run() {
  std::deque<Submitted> taken;
  std::vector<uint64_t> cancels;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      busy_ = core_->has_work();
      publish_stats_locked();
      if (!busy_ && inbox_.empty() && cancels_.empty()) idle_.notify_all();
      wake_.wait(lock, [&] { return stop_ || busy_ || !inbox_.empty() || !cancels_.empty(); });
      if (stop_) break;
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
