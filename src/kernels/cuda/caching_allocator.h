// kernels/cuda/caching_allocator.h — CachingAllocator: device memory for one GPU, with freed
// blocks kept in size classes and reused instead of returned to the driver (cudaMalloc and
// cudaFree synchronise the device). Invariant: every pointer handed out is either live or in
// exactly one free list; cudaFree happens only in release_cached() and the destructor.
// Reuse is stream-ordered: the backend runs on one stream, so a block freed after queued work
// and handed out again is only touched by work queued later on that same stream.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/buffer.h"

namespace rill::cuda {

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device_ordinal) : device_ordinal_(device_ordinal) {}
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Throws rill::Error naming the bytes requested and the bytes free when the GPU is full
  /// (after releasing the cache and retrying once).
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda; }

  /// Called with each block as it is freed (after the free; outside the allocator's lock).
  void set_free_listener(std::function<void(void* ptr, size_t bytes)> listener) { on_free_ = std::move(listener); }
  /// Returns every cached (free) block to the driver.
  void release_cached();
  size_t bytes_in_use() const;
  size_t bytes_cached() const;

  /// The size class a request is rounded up to (512 B granules below 1 MiB, 2 MiB above).
  static size_t round_size(size_t bytes);

 private:
  int device_ordinal_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;         ///< block size → cached block
  std::unordered_map<void*, size_t> live_;    ///< handed-out block → its real size
  size_t in_use_ = 0;
  size_t cached_ = 0;
  std::function<void(void*, size_t)> on_free_;
};

}  // namespace rill::cuda
