// kernels/cuda/check.cpp — the throwing half of RILL_CUDA_CHECK and RILL_CUBLAS_CHECK.
#include "kernels/cuda/check.h"

#include <cublas_v2.h>

#include "core/error.h"

namespace rill::cuda {

void throw_cuda_error(const char* file, int line, const char* expr, int code, const char* what) {
  fail("{}:{}: {} failed: {} (cuda error {})", file, line, expr, what, code);
}

void throw_cublas_error(const char* file, int line, const char* expr, int status) {
  auto s = cublasStatus_t(status);
  fail("{}:{}: {} failed: {} ({}, status {})", file, line, expr, cublasGetStatusString(s),
       cublasGetStatusName(s), status);
}

void throw_error(const char* message) { throw Error(message); }

}  // namespace rill::cuda
