// kernels/no_cuda/no_cuda.cpp — the CUDA entry points of a build without CUDA.
#include "core/error.h"
#include "kernels/kernels.h"

namespace rill {

bool cuda_available() { return false; }

std::unique_ptr<Kernels> make_cuda_kernels(int) {
  fail("this rill build has no CUDA backend (configure with -DRILL_CUDA=ON and nvcc installed)");
}

}  // namespace rill
