// bench/kernels/probe_util.cuh — what the standalone lab probes (read_probe.cu, tile_stream_probe.cu,
// latency_probe.cu) share: a CUDA call checked with its file and line, the median time of a launch
// with the L2 flushed first, and a 1-D bulk copy with an L2 policy. Header-only so that each probe
// still builds alone with one nvcc command.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/mma.cuh"  // smem_addr

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace rill::probe {

// The SM this thread runs on.
__device__ __forceinline__ unsigned smid() {
  unsigned id = 0;
#if defined(__CUDA_ARCH__)
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
#endif
  return id;
}

// Device 0's SM count; its properties in `prop`.
inline int device_sms(cudaDeviceProp& prop) {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaGetDeviceProperties(&prop, 0));
  return sms;
}

// bytes from global src to shared dst by the bulk copy engine, completing on bar with a transaction
// count, under the L2 policy (sm_90).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(rill::cuda::smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(rill::cuda::smem_addr(bar)), "l"(policy)
      : "memory");
#endif
}

// Median µs of `run` over `reps` timed runs (one untimed first), each after `flush` (larger than
// L2) is overwritten, so weights come from HBM as in a decode step.
template <class F>
double median_us(F run, void* flush, size_t flush_bytes, int reps = 15) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> v;
  for (int r = 0; r <= reps; ++r) {
    CK(cudaMemset(flush, r, flush_bytes));
    CK(cudaEventRecord(a));
    run();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r > 0) v.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e3;
}

}  // namespace rill::probe
