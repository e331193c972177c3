// core/tensor.h — Tensor: a non-owning view (data pointer, dtype, shape, strides, device).
// Invariant: strides are in elements; a view never outlives the Buffer it points into
// (the owner guarantees it). Tensor does no arithmetic: ops live in kernels/.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "core/dtype.h"

namespace rill {

enum class Device : uint8_t { cpu, cuda };

class Tensor {
 public:
  static constexpr int kMaxDims = 5;

  Tensor() = default;
  /// A contiguous view of `data` with the given shape.
  Tensor(void* data, DType dtype, std::span<const int64_t> shape, Device device = Device::cpu);
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::cpu)
      : Tensor(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()), device) {}

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  bool defined() const { return ndim_ > 0; }
  /// Size of dimension d; negative d counts from the end.
  int64_t size(int d) const { return shape_[norm_dim(d)]; }
  int64_t stride(int d) const { return strides_[norm_dim(d)]; }
  std::span<const int64_t> shape() const { return {shape_.data(), size_t(ndim_)}; }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  /// Same data, new shape with the same element count (requires a contiguous view).
  Tensor view(std::span<const int64_t> shape) const;
  Tensor view(std::initializer_list<int64_t> shape) const {
    return view(std::span<const int64_t>(shape.begin(), shape.size()));
  }
  /// Rows [begin, end) of dimension 0.
  Tensor slice(int64_t begin, int64_t end) const;
  /// "bf16[4, 128]" — for error messages.
  std::string describe() const;

 private:
  int norm_dim(int d) const { return d < 0 ? d + ndim_ : d; }

  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
};

}  // namespace rill
