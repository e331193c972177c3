// core/thread_pool.h — a fixed pool of worker threads for data-parallel CPU kernels.
// Invariant: parallel_for returns only after every chunk ran; a parallel_for issued from inside
// a worker runs serially on that worker (no nested fan-out, no deadlock).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rill {

class ThreadPool {
 public:
  /// num_threads counts the calling thread: 1 means no workers. 0 = hardware concurrency.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return int(workers_.size()) + 1; }

  /// Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  /// The shared process pool (sized by RILL_NUM_THREADS or the hardware).
  static ThreadPool& global();

 private:
  void worker_loop(int index);
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // Current job (valid while a parallel_for is in flight).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  int busy_workers_ = 0;
  std::mutex submit_mutex_;
};

}  // namespace rill
