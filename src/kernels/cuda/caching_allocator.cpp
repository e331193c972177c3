// kernels/cuda/caching_allocator.cpp — size-class caching of cudaMalloc'd blocks.
#include "kernels/cuda/caching_allocator.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/check.h"

namespace rill::cuda {

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (bytes < (size_t(1) << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

CachingAllocator::~CachingAllocator() {
  if (in_use_ != 0) logger().warn("CUDA allocator destroyed with {} bytes still in use", in_use_);
  for (auto& [size, ptr] : free_) cudaFree(ptr);
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  // Reuse a cached block of the same class, or a larger one when it wastes at most 1/8.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size + size / 8) {
    void* p = it->second;
    live_.emplace(p, it->first);
    in_use_ += it->first;
    cached_ -= it->first;
    free_.erase(it);
    return p;
  }
  RILL_CUDA_CHECK(cudaSetDevice(device_ordinal_));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    // Give the cache back and try once more before reporting.
    for (auto& [s, q] : free_) RILL_CUDA_CHECK(cudaFree(q));
    free_.clear();
    cached_ = 0;
    err = cudaMalloc(&p, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    fail("CUDA out of memory on device {}: {} bytes requested ({} after rounding), {} bytes free of "
         "{}, {} bytes in use by rill",
         device_ordinal_, bytes, size, free_bytes, total, in_use_);
  }
  RILL_CUDA_CHECK(err);
  live_.emplace(p, size);
  in_use_ += size;
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  size_t size = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    RILL_CHECK(it != live_.end(), "CUDA allocator: {} was not allocated here (or freed twice)", ptr);
    size = it->second;
    live_.erase(it);
    in_use_ -= size;
    cached_ += size;
    free_.emplace(size, ptr);
  }
  if (on_free_) on_free_(ptr, size);
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  for (auto& [size, ptr] : free_) RILL_CUDA_CHECK(cudaFree(ptr));
  free_.clear();
  cached_ = 0;
}

size_t CachingAllocator::bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

size_t CachingAllocator::bytes_cached() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

}  // namespace rill::cuda
