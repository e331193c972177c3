// kernels/cuda/launch.h — kernel launches with programmatic dependent launch (PDL, sm_90+).
//
// A kernel launched through launch_pdl may start while the kernel before it in the stream is still
// running (a CUDA graph captures the same edge), so its CTAs are resident and its constant loads
// (weights) are in flight by the time its inputs are ready: the launch latency and the ramp-up of
// each of a decode step's ~400 launches overlap the tail of the previous one. The contract, for
// every kernel launched this way:
//   - pdl_wait() before the first read of anything an earlier kernel wrote AND before the first
//     global write (an earlier kernel may still be reading the buffer); only data no kernel
//     writes (weights, biases, tables) may be read before it;
//   - pdl_trigger() once the kernel no longer needs its SM slots to itself: the next kernel may
//     then launch (its own pdl_wait still waits for this whole grid to finish and its writes
//     to be visible; the trigger fires when every CTA has issued it or exited).
// Kernels launched the ordinary way serialize fully, as before. pdl_wait is a no-op when the
// kernel was launched without the attribute, and both are compiled out below sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/check.h"

namespace rill::cuda {

/// Whether launch_pdl asks for overlap: the device is sm_90+ and RILL_PDL is not 0 (set by the
/// backend at start; see set_pdl_enabled).
bool pdl_enabled();
void set_pdl_enabled(bool on);
/// RILL_PDL: null → true; "1" → true; "0" → false; anything else → an error naming the variable.
bool parse_pdl_setting(const char* value);

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap its predecessor when
/// pdl_enabled(). Checked like every launch.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  RILL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace rill::cuda
