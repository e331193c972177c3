// core/thread_pool.cpp — chunked fan-out with a generation counter; the caller works too.
#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace rill {
namespace {
thread_local bool t_in_worker = false;
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("RILL_NUM_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

void ThreadPool::run_chunks() {
  for (;;) {
    int64_t c = next_chunk_.fetch_add(1);
    int64_t begin = c * job_chunk_;
    if (begin >= job_n_) break;
    (*job_)(begin, std::min(job_n_, begin + job_chunk_));
  }
}

void ThreadPool::worker_loop(int) {
  t_in_worker = true;
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard lock(mutex_);
      if (--busy_workers_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  if (workers_.empty() || t_in_worker || max_chunks == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard submit(submit_mutex_);  // one job at a time from several callers
  // Four chunks per thread balances uneven rows without much scheduling overhead.
  int64_t chunks = std::min<int64_t>(max_chunks, int64_t(num_threads()) * 4);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = (n + chunks - 1) / chunks;
    next_chunk_.store(0);
    busy_workers_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  bool was_worker = t_in_worker;
  t_in_worker = true;  // nested calls from fn on this thread run serially
  run_chunks();
  t_in_worker = was_worker;
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return busy_workers_ == 0; });
  job_ = nullptr;
}

}  // namespace rill
