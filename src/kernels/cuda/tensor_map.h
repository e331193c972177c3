// kernels/cuda/tensor_map.h — tensor maps for the copy engine (TMA, sm_90): the driver's
// cuTensorMapEncodeTiled, reached through the runtime's entry-point query (no link against libcuda).
// Host code; used by the warpgroup GEMM (gemm_wgmma.cu) and attention (attention_wgmma.cu) kernels.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace rill::cuda {

/// cuTensorMapEncodeTiled; throws when the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

/// A bf16 tensor of `rank` dimensions (sizes innermost first, byte strides of the outer ones) read
/// in `box` boxes written to shared memory with the 128-byte swizzle, no out-of-bounds fill.
/// Throws "[<who>] cuTensorMapEncodeTiled failed (error N) for a bf16 tensor of sizes [...]" when the
/// driver refuses it.
CUtensorMap swizzled_bf16_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                              const cuuint32_t* box, CUtensorMapL2promotion promotion, const char* who);
/// The same with the swizzle given (CU_TENSOR_MAP_SWIZZLE_NONE: the bytes land as they are).
CUtensorMap bf16_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                     const cuuint32_t* box, CUtensorMapL2promotion promotion, CUtensorMapSwizzle swizzle,
                     const char* who);

}  // namespace rill::cuda
