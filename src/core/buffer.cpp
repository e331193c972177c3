// core/buffer.cpp — host allocator, Buffer and Arena.
#include "core/buffer.h"

#include <unistd.h>

#include <cstdlib>
#include <new>
#include <utility>

#include "core/error.h"

namespace rill {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) {
      // What the system could still give, as the CUDA allocator's error says the device's free bytes.
      const long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), total = sysconf(_SC_PHYS_PAGES);
      fail("out of host memory: {} bytes requested, {} available of {} in this machine", bytes,
           page > 0 && avail >= 0 ? size_t(avail) * size_t(page) : size_t(0),
           page > 0 && total >= 0 ? size_t(total) * size_t(page) : size_t(0));
    }
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  Device device() const override { return Device::cpu; }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator instance;
  return instance;
}

Buffer::Buffer(Allocator& allocator, size_t bytes)
    : allocator_(&allocator), data_(allocator.allocate(bytes)), size_(bytes) {}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void Buffer::reset() {
  if (allocator_ && data_) allocator_->deallocate(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Tensor Buffer::as(DType dtype, std::span<const int64_t> shape) const {
  Tensor t(data_, dtype, shape, device());
  RILL_CHECK(t.nbytes() <= size_, "view {} does not fit a buffer of {} bytes", t.describe(), size_);
  return t;
}

Tensor Arena::tensor(DType dtype, std::span<const int64_t> shape) {
  Tensor probe(nullptr, dtype, shape, buffer_.device());
  size_t bytes = (probe.nbytes() + 255) / 256 * 256;
  if (used_ + bytes > buffer_.size())
    fail("step arena exhausted: {} bytes needed for {}, {} of {} in use", bytes, probe.describe(), used_,
         buffer_.size());
  Tensor t(static_cast<char*>(buffer_.data()) + used_, dtype, shape, buffer_.device());
  used_ += bytes;
  if (used_ > high_water_) high_water_ = used_;
  return t;
}

}  // namespace rill
