// bench/kernels/icache_probe.cu — a standalone lab file: what does running code that is not in the
// SM's instruction caches cost while a weight stream is in flight? The latency-bound kernels of a
// decode step are large (the cluster attention kernel ~63 KB of SASS, the norm ~45 KB, a decode GEMM
// ~89 KB) and each runs once a layer on an SM that ran other kernels' code in between, so their
// instructions may come from L2 — whose round trip the weight stream makes ~0.5-1.2 µs (latency_probe).
//
// One launch: block 0 (one warp) runs straight-line bodies of kBody independent multiply-adds each
// (~16 B of SASS an instruction: ~32 KB a body, 8 independent chains so that issue, not latency,
// bounds a warm body at ~1 instruction a cycle): body A once (first run on the GPU: code from HBM or
// L2), A again (warm: in the SM's caches), then eight other bodies twice (the first pass brings their
// code into L2, the second runs each with the other seven — 224 KB — fetched since: "cold in the SM,
// in L2"), then A again (cold in the SM after 256 KB of other code) and once more (warm). The other
// blocks stream as latency_probe's (CTAs an SM × 8 KB copies in flight). Medians of 5 launches, ns.
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/icache_probe.cu -o icache_probe; run alone on an H100 / H200 (~1 s, 4 GB).
// Not part of the library or of any test: a measurement (bench/RESULTS.md, run AC).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "probe_util.cuh"

namespace {

using rill::probe::kChunk;
using rill::probe::kMaxDepth;
using rill::probe::now_ns;
constexpr int kBody = 2048;  // multiply-adds a body
constexpr int kOthers = 8;
constexpr size_t kSmem = size_t(kMaxDepth) * kChunk + 1024;

struct Params {
  const unsigned char* stream;
  int64_t chunks;
  int depth;
  unsigned m;  // a runtime multiplier: nothing folds
  int* done;
  // [0] A first, [1] A warm, [2] other bodies, first pass (sum), [3] second pass (sum), [4] A after
  // them, [5] A warm again, [6] sink; [8..10] the stream's bytes, first start, last end.
  unsigned long long* res;
};

// kBody multiply-adds over 8 registers (each reads the next register: 8 independent chains); K makes
// each instantiation a function of its own (its own code).
template <int K>
__device__ __noinline__ unsigned body(unsigned x, unsigned m) {
  unsigned r[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) r[j] = x + unsigned(j * K + j);
#pragma unroll
  for (int i = 0; i < kBody; ++i)
    asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(r[i % 8]) : "r"(m), "r"(r[(i + 1) % 8]));
  unsigned s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s ^= r[j];
  return s;
}

template <int... K>
__device__ __forceinline__ unsigned others(unsigned x, unsigned m, std::integer_sequence<int, K...>) {
  ((x = body<K + 1>(x, m)), ...);
  return x;
}

__device__ __forceinline__ unsigned long long timed(unsigned long long& t) {
  const unsigned long long now = now_ns(), d = now - t;
  t = now;
  return d;
}

__global__ void __launch_bounds__(32) probe_kernel(Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kMaxDepth];
  if (blockIdx.x == 0) {  // the code runner (its whole warp: as a kernel's warp would fetch)
    unsigned long long t0 = now_ns();
    while (now_ns() - t0 < 30000) {  // 30 µs for the stream to reach its rate
    }
    const auto seq = std::make_integer_sequence<int, kOthers>{};
    unsigned x = threadIdx.x;
    unsigned long long t = now_ns(), d[6];
    x = body<0>(x, p.m), d[0] = timed(t);
    x = body<0>(x, p.m), d[1] = timed(t);
    x = others(x, p.m, seq), d[2] = timed(t);
    x = others(x, p.m, seq), d[3] = timed(t);
    x = body<0>(x, p.m), d[4] = timed(t);
    x = body<0>(x, p.m), d[5] = timed(t);
    if (threadIdx.x == 0) {
      for (int i = 0; i < 6; ++i) p.res[i] = d[i];
      p.res[6] = x;
      asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p.done), "r"(1) : "memory");
    }
    return;
  }
  if (threadIdx.x != 0 || p.depth == 0) return;
  rill::probe::stream_until(p.stream, p.chunks, p.depth, p.done, smem_raw, full, p.res + 8);
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  std::printf("device %s, %d SMs; a body: %d multiply-adds (~%d KB of code)\n", prop.name, sms, kBody,
              kBody * 16 / 1024);
  const size_t stream_bytes = size_t(4) << 30;
  unsigned char* stream;
  CK(cudaMalloc(&stream, stream_bytes));
  CK(cudaMemset(stream, 1, stream_bytes));
  int* done;
  unsigned long long* res;
  CK(cudaMalloc(&done, sizeof(int)));
  CK(cudaMalloc(&res, 16 * sizeof(unsigned long long)));
  CK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));

  std::printf("%-26s %8s %10s %10s %14s %14s %10s %10s %12s\n", "stream (CTAs/SM x copies)", "KB/SM", "A first",
              "A warm", "others 1st/body", "others 2nd/body", "A cold", "A warm", "stream GB/s");
  const std::pair<int, int> settings[] = {{0, 0}, {1, 8}, {2, 5}, {3, 5}, {3, 8}};
  for (const auto& [per_sm, depth] : settings) {
    std::vector<double> v[6], gbs;
    for (int rep = 0; rep < 5; ++rep) {
      Params p;
      p.stream = stream;
      p.chunks = int64_t(stream_bytes / kChunk);
      p.depth = depth;
      p.m = 0x9e3779b9u + unsigned(rep);
      p.done = done;
      p.res = res;
      unsigned long long init[16] = {};
      init[9] = ~0ull;
      CK(cudaMemcpy(res, init, sizeof(init), cudaMemcpyHostToDevice));
      CK(cudaMemset(done, 0, sizeof(int)));
      const unsigned grid = per_sm > 0 ? unsigned(per_sm * sms) : 1u;  // the runner takes a stream slot
      probe_kernel<<<grid, 32, kSmem>>>(p);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      unsigned long long r[16];
      CK(cudaMemcpy(r, res, sizeof(r), cudaMemcpyDeviceToHost));
      for (int i = 0; i < 6; ++i) v[i].push_back(double(r[i]) / (i == 2 || i == 3 ? kOthers : 1));
      gbs.push_back(per_sm > 0 && r[10] > r[9] ? double(r[8]) / double(r[10] - r[9]) : 0.0);
    }
    char label[48];
    std::snprintf(label, sizeof(label), per_sm ? "%d x %d" : "none", per_sm, depth);
    std::printf("%-26s %8d %10.0f %10.0f %14.0f %14.0f %10.0f %10.0f %12.0f\n", label,
                per_sm * depth * int(kChunk / 1024), median(v[0]), median(v[1]), median(v[2]), median(v[3]),
                median(v[4]), median(v[5]), median(gbs));
  }
  return 0;
}
