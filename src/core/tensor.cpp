// core/tensor.cpp — view arithmetic for Tensor.
#include "core/tensor.h"

#include <fmt/format.h>

#include "core/error.h"

namespace rill {

Tensor::Tensor(void* data, DType dtype, std::span<const int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), ndim_(int(shape.size())) {
  RILL_CHECK(shape.size() <= size_t(kMaxDims), "tensor rank {} > {}", shape.size(), kMaxDims);
  int64_t stride = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    RILL_CHECK(shape[d] >= 0, "negative dimension {}", shape[d]);
    shape_[d] = shape[d];
    strides_[d] = stride;
    stride *= shape[d];
  }
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];
  return ndim_ == 0 ? 0 : n;
}

bool Tensor::is_contiguous() const {
  int64_t stride = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != stride) return false;
    stride *= shape_[d];
  }
  return true;
}

Tensor Tensor::view(std::span<const int64_t> shape) const {
  RILL_CHECK(is_contiguous(), "view of a non-contiguous tensor {}", describe());
  Tensor t(data_, dtype_, shape, device_);
  RILL_CHECK(t.numel() == numel(), "view {} -> {} changes the element count", describe(), t.describe());
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  RILL_CHECK(ndim_ >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [{}, {}) of {}", begin,
             end, describe());
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * int64_t(dtype_size(dtype_));
  return t;
}

std::string Tensor::describe() const {
  std::string s = fmt::format("{}[", dtype_name(dtype_));
  for (int d = 0; d < ndim_; ++d) s += fmt::format("{}{}", d ? ", " : "", shape_[d]);
  return s + (device_ == Device::cuda ? "]@cuda" : "]");
}

}  // namespace rill
