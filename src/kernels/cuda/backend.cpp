// kernels/cuda/backend.cpp — entry point of the CUDA Kernels backend.
// NOTE: the CUDA implementation of Kernels is the subject of its own issue (CUDA backend);
// until it lands a CUDA build refuses to create one with a clear message instead of
// pretending. cuda_available() and the smoke kernel are real.
#include "core/error.h"
#include "kernels/kernels.h"

namespace rill {

std::unique_ptr<Kernels> make_cuda_kernels(int) {
  fail("the CUDA Kernels backend is not in this build yet; use --device cpu");
}

}  // namespace rill
