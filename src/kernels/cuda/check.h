// kernels/cuda/check.h — RILL_CUDA_CHECK: every CUDA runtime call and launch is checked and a
// failure throws rill::Error carrying file:line and the call text. No CUDA error is swallowed.
#pragma once

namespace rill::cuda {
/// Throws rill::Error "file:line: expr failed: <cuda error string>". Defined in check.cpp (host
/// compiler) so .cu files need no fmt.
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* expr, int code, const char* what);
}  // namespace rill::cuda

#define RILL_CUDA_CHECK(expr)                                                                     \
  do {                                                                                            \
    cudaError_t rill_err_ = (expr);                                                               \
    if (rill_err_ != cudaSuccess)                                                                 \
      ::rill::cuda::throw_cuda_error(__FILE__, __LINE__, #expr, int(rill_err_), cudaGetErrorString(rill_err_)); \
  } while (0)

/// After a kernel launch: checks the launch configuration error.
#define RILL_CUDA_CHECK_LAUNCH() RILL_CUDA_CHECK(cudaGetLastError())
