// kernels/cuda/tensor_map.h — tensor maps for the copy engine (TMA, sm_90): the driver's
// cuTensorMapEncodeTiled, reached through the runtime's entry-point query (no link against libcuda).
// Host code; used by the warpgroup GEMM (gemm_wgmma.cu) and attention (attention_wgmma.cu) kernels.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace rill::cuda {

/// cuTensorMapEncodeTiled; throws when the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

}  // namespace rill::cuda
