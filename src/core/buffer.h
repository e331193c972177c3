// core/buffer.h — owning memory (Buffer), allocators, and the per-step Arena.
// Invariant: memory returned by an Allocator is freed only through the same Allocator.
#pragma once

#include <cstddef>
#include <span>

#include "core/tensor.h"

namespace rill {

/// Source of device or host memory. Implementations: cpu_allocator(); the CUDA backend adds its own.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;  ///< throws rill::Error when out of memory (bytes named)
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

/// 64-byte aligned host memory.
Allocator& cpu_allocator();

/// Owns `bytes` of memory from an allocator. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& allocator, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return allocator_ ? allocator_->device() : Device::cpu; }
  /// A contiguous view of the start of the buffer; checks that it fits.
  Tensor as(DType dtype, std::span<const int64_t> shape) const;
  Tensor as(DType dtype, std::initializer_list<int64_t> shape) const {
    return as(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }

 private:
  void reset();
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

/// A bump allocator over one Buffer for per-step temporaries: reset() at the start of each
/// step, nothing is freed individually, nothing is allocated from the system in the hot path.
class Arena {
 public:
  Arena() = default;
  Arena(Allocator& allocator, size_t bytes) : buffer_(allocator, bytes) {}
  /// A fresh tensor; throws rill::Error when the arena is exhausted (size named).
  Tensor tensor(DType dtype, std::span<const int64_t> shape);
  Tensor tensor(DType dtype, std::initializer_list<int64_t> shape) {
    return tensor(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t capacity() const { return buffer_.size(); }
  size_t high_water() const { return high_water_; }

 private:
  Buffer buffer_;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace rill
