// kernels/cuda/check.h — RILL_CUDA_CHECK / RILL_CUBLAS_CHECK: every CUDA runtime and cuBLAS call
// and every launch is checked; a failure throws rill::Error carrying file:line and the call text.
// No CUDA error is swallowed. Usable from .cu files (no fmt here).
#pragma once

namespace rill::cuda {
/// Throws rill::Error "file:line: expr failed: <cuda error string>". Defined in check.cpp (host
/// compiler) so .cu files need no fmt.
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* expr, int code, const char* what);
/// Same for a cublasStatus_t (name and string from cuBLAS).
[[noreturn]] void throw_cublas_error(const char* file, int line, const char* expr, int status);
/// Throws rill::Error with a plain message (for .cu launchers that must reject an argument).
[[noreturn]] void throw_error(const char* message);
}  // namespace rill::cuda

#define RILL_CUDA_CHECK(expr)                                                                     \
  do {                                                                                            \
    cudaError_t rill_err_ = (expr);                                                               \
    if (rill_err_ != cudaSuccess)                                                                 \
      ::rill::cuda::throw_cuda_error(__FILE__, __LINE__, #expr, int(rill_err_), cudaGetErrorString(rill_err_)); \
  } while (0)

/// After a kernel launch: checks the launch configuration error.
#define RILL_CUDA_CHECK_LAUNCH() RILL_CUDA_CHECK(cudaGetLastError())

#define RILL_CUBLAS_CHECK(expr)                                                     \
  do {                                                                              \
    int rill_status_ = int(expr);                                                   \
    if (rill_status_ != 0) ::rill::cuda::throw_cublas_error(__FILE__, __LINE__, #expr, rill_status_); \
  } while (0)
