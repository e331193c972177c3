// bench/kernels/probe_util.cuh — what the standalone lab probes (read_probe.cu, tile_stream_probe.cu,
// latency_probe.cu, icache_probe.cu) share: a CUDA call checked with its file and line, the median time
// of a launch with the L2 flushed first, a 1-D bulk copy with an L2 policy, and a weight stream to run
// latency-bound work under. Header-only so that each probe
// still builds alone with one nvcc command.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_bf16.h>

#include "kernels/cuda/attention_common.cuh"  // exp2_ftz
#include "kernels/cuda/device_utils.cuh"  // l2_evict_first_policy
#include "kernels/cuda/launch.h"  // global_ns
#include "kernels/cuda/mbarrier.cuh"
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

// A launch of `clusters` clusters of `size` blocks along x (blocks of `threads`, `smem` bytes of dynamic
// shared memory); `attr` holds the cluster attribute the configuration points at.
inline cudaLaunchConfig_t cluster_launch(int clusters, int size, int threads, size_t smem, cudaLaunchAttribute& attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(clusters * size));
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(size);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
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

using rill::cuda::global_ns;
__device__ __forceinline__ unsigned long long now_ns() { return global_ns(); }

__device__ __forceinline__ int load_flag(const int* p) {
  int v = 0;
#if defined(__CUDA_ARCH__)
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#endif
  return v;
}

// A stream's result: its bytes added to res[0], its first start / last end (ns) to res[1] (min) / res[2]
// (max) — the host's rate is res[0] / (res[2] - res[1]).
__device__ __forceinline__ void add_stream_result(unsigned long long* res, unsigned long long bytes,
                                                  unsigned long long t0, unsigned long long t1) {
  atomicAdd(res, bytes);
  atomicMin(res + 1, t0);
  atomicMax(res + 2, t1);
}

// The weight stream of the probes that run latency-bound work under it: thread 0 of a stream CTA keeps
// `depth` (≤ kMaxDepth) copies of kChunk bytes (the decode GEMM's 64 × 64 bf16 stage) in flight,
// evict-first, walking `chunks` chunks of `stream` from its block index, until *done is set (or, with
// deadline_ns, that long after it started: a stream that cannot stop itself otherwise waits forever
// for work that cannot be placed beside it); then add_stream_result.
constexpr unsigned kChunk = 8192;
constexpr int kMaxDepth = 8;
__device__ __forceinline__ void stream_until(const unsigned char* stream, int64_t chunks, int depth, const int* done,
                                             unsigned char* smem_raw, uint64_t* full, unsigned long long* res,
                                             unsigned long long deadline_ns = 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned char* stage = smem_raw + ((1024 - (rill::cuda::smem_addr(smem_raw) & 1023u)) & 1023u);
  for (int s = 0; s < depth; ++s) rill::cuda::mbar_init(&full[s], 1);
  rill::cuda::mbar_init_fence();
  const uint64_t policy = rill::cuda::l2_evict_first_policy();
  const int64_t ctas = gridDim.x - 1;
  int64_t chunk = blockIdx.x - 1, issued = 0;
  const unsigned long long t0 = now_ns();
  for (;; ++issued) {
    const int s = int(issued % depth);
    const int64_t use = issued / depth;
    if (use > 0) rill::cuda::mbar_wait(&full[s], unsigned(use - 1) & 1u);  // its previous copy landed
    if ((issued & 15) == 0 && (load_flag(done) || (deadline_ns && now_ns() - t0 > deadline_ns))) break;
    rill::cuda::mbar_arrive_expect_tx(&full[s], kChunk);
    bulk_load(stage + s * kChunk, stream + chunk * kChunk, kChunk, &full[s], policy);
    chunk += ctas;
    if (chunk >= chunks) chunk -= chunks;
  }
  for (int64_t i = max(int64_t(0), issued - depth); i < issued; ++i)  // the copies still in flight
    rill::cuda::mbar_wait(&full[i % depth], unsigned(i / depth) & 1u);
  const unsigned long long t1 = now_ns();
  add_stream_result(res, (unsigned long long)(issued)*kChunk, t0, t1);
#endif
}

// The decode attention's span walk on shared memory alone — attention_decode.cuh's layout (Q 16 × 128,
// K and V 64 × 128 bf16 in rows of 136) and a round of its operations on four warps: Q·Kᵀ (8 k steps of
// ldmatrix + 2 mma), the row max across warps through shared memory and a barrier, exp2, P through
// shared memory and a barrier, P·V (ldmatrix.trans + mma), a barrier; no global access. The work that
// smem_work_probe and burst_onset_probe run beside streams and launches. One block of kThreads threads;
// the struct lives in shared memory.
struct WalkWork {
  static constexpr int kD = 128, kStride = kD + 8, kBN = 64, kBM = 16, kThreads = 128;
  __nv_bfloat16 q_s[kBM * kStride], k_s[kBN * kStride], v_s[kBN * kStride];
  float max_s[4 * 2 * 8], sum_s[8 * 2 * 32];
  uint2 p_s[8 * 32];

  __device__ void fill() {  // (then a barrier)
    for (int i = int(threadIdx.x); i < kBM * kStride; i += kThreads) q_s[i] = __float2bfloat16(float(i % 13) * 0.01f);
    for (int i = int(threadIdx.x); i < kBN * kStride; i += kThreads) {
      k_s[i] = __float2bfloat16(float(i % 11) * 0.01f);
      v_s[i] = __float2bfloat16(float(i % 7) * 0.02f);
    }
  }
  __device__ __forceinline__ void round(float (&o)[4][4]) {
    const int t = int(threadIdx.x), warp = t / 32, lane = t % 32, g = lane / 4, tig = lane % 4;
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t af[4], bf[4];
      rill::cuda::ldmatrix_x4(af, q_s + (lane % 16) * kStride + (lane / 16) * 8 + kk * 16);
      rill::cuda::ldmatrix_x4(bf, k_s + (warp * 16 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 +
                                      ((lane / 8) % 2) * 8);
      rill::cuda::mma_bf16_16816(s[0], af, bf[0], bf[1]);
      rill::cuda::mma_bf16_16816(s[1], af, bf[2], bf[3]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // (the kernel's cross-warp max, as written there)
      float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (tig == 0) max_s[(warp * 2 + h) * 8 + g] = mx;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = max_s[h * 8 + g];
#pragma unroll
      for (int w = 1; w < 4; ++w) mx = fmaxf(mx, max_s[(w * 2 + h) * 8 + g]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        s[j][2 * h] = rill::cuda::attention_detail::exp2_ftz(s[j][2 * h] - mx);
        s[j][2 * h + 1] = rill::cuda::attention_detail::exp2_ftz(s[j][2 * h + 1] - mx);
        sum_s[((2 * warp + j) * 2 + h) * 32 + lane] = s[j][2 * h] + s[j][2 * h + 1];
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(s[j][0], s[j][1]), hi = __floats2bfloat162_rn(s[j][2], s[j][3]);
      p_s[(2 * warp + j) * 32 + lane] =
          make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint2 p0 = p_s[(2 * kk) * 32 + lane], p1 = p_s[(2 * kk + 1) * 32 + lane];
      const uint32_t pf[4] = {p0.x, p0.y, p1.x, p1.y};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t vf[4];
        rill::cuda::ldmatrix_x4_trans(vf, v_s + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride +
                                              (2 * warp + j) * 16 + (lane / 16) * 8);
        rill::cuda::mma_bf16_16816(o[2 * j], pf, vf[0], vf[1]);
        rill::cuda::mma_bf16_16816(o[2 * j + 1], pf, vf[2], vf[3]);
      }
    }
    __syncthreads();
  }
  // Keeps the work: a value no run produces, stored only if it were.
  __device__ void keep(const float (&o)[4][4], float* sink) const {
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc += o[i][0] + o[i][1] + o[i][2] + o[i][3] + sum_s[threadIdx.x];
    if (acc == 12345.f) sink[0] = acc;
  }
};

// The median of v (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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
