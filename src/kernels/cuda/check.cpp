// kernels/cuda/check.cpp — the throwing half of RILL_CUDA_CHECK.
#include "kernels/cuda/check.h"

#include "core/error.h"

namespace rill::cuda {

void throw_cuda_error(const char* file, int line, const char* expr, int code, const char* what) {
  fail("{}:{}: {} failed: {} (cuda error {})", file, line, expr, what, code);
}

}  // namespace rill::cuda
