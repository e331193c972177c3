// bench/kernels/probe_util.cuh — what the standalone lab probes (read_probe.cu, tile_stream_probe.cu)
// share: a CUDA call checked with its file and line, and the median time of a launch with the L2
// flushed first. Header-only so that each probe still builds alone with one nvcc command.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace rill::probe {

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
