// kernels/cuda/arg_checks.h — the argument checks of CudaKernels' ops (backend.cpp,
// backend_attention.cpp): each failure is a rill::Error naming the op and the argument, raised
// before anything is enqueued.
#pragma once

#include "core/error.h"
#include "core/tensor.h"

namespace rill::cuda {

inline void expect_on_device(const Tensor& t, const char* op, const char* name) {
  RILL_ENSURE(t.defined(), "[{}] {} is not set", op, name);
  RILL_ENSURE(t.device() == Device::cuda, "[{}] {} {} is not on the CUDA device", op, name, t.describe());
  RILL_ENSURE(t.is_contiguous(), "[{}] {} {} must be contiguous", op, name, t.describe());
}

inline void expect_dtype(const Tensor& t, DType d, const char* op, const char* name) {
  RILL_ENSURE(t.dtype() == d, "[{}] {} {} must be {}", op, name, t.describe(), dtype_name(d));
}

inline void expect_rank(const Tensor& t, int ndim, const char* op, const char* name) {
  RILL_ENSURE(t.ndim() == ndim, "[{}] {} {} must have {} dimensions", op, name, t.describe(), ndim);
}

inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int d = 0; d < a.ndim(); ++d)
    if (a.size(d) != b.size(d)) return false;
  return true;
}

}  // namespace rill::cuda
