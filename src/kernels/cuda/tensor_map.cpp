// kernels/cuda/tensor_map.cpp — see tensor_map.h.
#include "kernels/cuda/tensor_map.h"

#include <cuda_runtime.h>

#include <string>

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

CUtensorMap swizzled_bf16_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                              const cuuint32_t* box, CUtensorMapL2promotion promotion, const char* who) {
  return bf16_map(base, rank, dims, strides, box, promotion, CU_TENSOR_MAP_SWIZZLE_128B, who);
}

CUtensorMap bf16_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                     const cuuint32_t* box, CUtensorMapL2promotion promotion, CUtensorMapSwizzle swizzle,
                     const char* who) {
  CUtensorMap map;
  const cuuint32_t elem[5] = {1, 1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, cuuint32_t(rank),
                                          const_cast<void*>(base), dims, strides, box, elem,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string msg = std::string("[") + who + "] cuTensorMapEncodeTiled failed (error " + std::to_string(int(r)) +
                      ") for a bf16 tensor of sizes [";
    for (int i = 0; i < rank; ++i) msg += (i ? ", " : "") + std::to_string(dims[i]);
    throw_error((msg + "] (innermost first)").c_str());
  }
  return map;
}

}  // namespace rill::cuda
