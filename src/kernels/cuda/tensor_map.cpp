// kernels/cuda/tensor_map.cpp — see tensor_map.h.
#include "kernels/cuda/tensor_map.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace rill::cuda {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    RILL_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !p)
      throw_error("[cuda] the CUDA driver has no cuTensorMapEncodeTiled (needed by the sm_90a kernels)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace rill::cuda
