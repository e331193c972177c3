// kernels/cuda/smoke.h — a minimal CUDA kernel that proves the CUDA toolchain, the runtime
// link and a device round trip work. Only in builds with RILL_HAVE_CUDA.
#pragma once

#include <cstdint>

namespace rill::cuda {

/// y[i] = a * x[i] + y[i] on the GPU for host arrays of n floats; throws rill::Error on a CUDA error.
void smoke_saxpy(int64_t n, float a, const float* x, float* y);

}  // namespace rill::cuda
