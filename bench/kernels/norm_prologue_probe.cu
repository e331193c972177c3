// bench/kernels/norm_prologue_probe.cu — a standalone lab file: can a decode layer's add + RMSNorm move into the
// CTAs of the GEMM after it and gain what the norm kernel costs a batch-1 decode step?
//
// Today the o (or down) projection writes split-K partials (4 ranges × 4,096 f32), the add + RMSNorm kernel (a
// cluster of 8 blocks a row) folds them into the residual, normalizes and stores x, and the gate/up (or q/k/v)
// GEMM loads x after its wait. Leaving the norms out of a captured step gains ~2.4% at 512 keys (run AH), which
// bounds a fusion; the fusion's own cost is the question. Gate/up's CTAs each need all of x, so clusters of c
// CTAs each read a share of the row's ~80 KB (partials, residual, weight) from L2 — 384 / c clusters × 80 KB
// (7.7 MB at c = 4) at the moment the weight stream restarts — exchange their warps' sums and push their
// normalized shares to each other by st.async. Q/k/v's CTAs need x over their split range only: a cluster of a
// column tile's 4 ranges, rank = range, exchanges the sums alone. This probe runs both schedules without
// arithmetic, 12 layers of [o → (norm) → gate/up] and of [down → (norm) → q/k/v] chained by programmatic launches
// as in a decode graph, weights from HBM (the L2 flushed first), in µs a layer:
//   norm (today)     — the norm kernel (cluster of 8, trigger before its wait), then the GEMM loading x;
//   none (leave-out) — the GEMM loading x, no norm: the bound of any fusion;
//   fused c          — the GEMM on clusters of c CTAs with the norm in a prologue (gate/up: c = 2, 4, 8);
//   streams alone    — no x at all.
// The streams: the decode GEMM's schedule on 8 KB tiles (k-panels), 8 stages a CTA, 5 requested before the
// wait, the next launch let in once a CTA has requested its last tile; o / down: 64 column tiles × 4 split
// ranges (256 CTAs); gate/up: 384 column tiles walking all 64 k tiles; q/k/v: 96 × 4 ranges; three CTAs an SM.
// The step's gain is about (today − fused) × 36 layers for each of the two norms ("36x us": µs a step; a
// batch-1 step at 512 keys is ~4.1 ms on an H200, ~5.5 ms on an H100). A fusion is worth building if "fused"
// sits near "none"; near "today", the L2 reads cost what the kernel boundary did. (Run AS: the real q/k/v
// fusion, with 8 split ranges, counters and clusters of 4, measured 5.6% slower where this predicted a gain.)
//
// Built by hand (any machine with nvcc): nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a
// -I src bench/kernels/norm_prologue_probe.cu -o norm_prologue_probe; run alone on an H100 / H200 (~5 s,
// ~5 GB). Not part of the library or of any test: a measurement (bench/RESULTS.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_util.cuh"

namespace {

using rill::cuda::mbar_arrive;
using rill::cuda::mbar_arrive_expect_tx;
using rill::cuda::mbar_init;
using rill::cuda::mbar_init_fence;
using rill::cuda::mbar_wait;
using rill::cuda::smem_addr;
using rill::cuda::st_async_cluster;
using rill::probe::bulk_load;

constexpr int kStages = 8, kTile = 8192, kPrewait = 5, kLayers = 12;
constexpr int kHidden = 4096, kInter = 12288, kRanges = 4, kKTiles = kHidden / 64;
constexpr int kOTiles = kHidden / 64, kGuTiles = 2 * kInter / 64;  // 64, 384
constexpr int kProThreads = 128;                                     // the gate/up prologue's (and consumer's) warps
constexpr size_t kStageBytes = size_t(kStages) * kTile + 1024;       // 1024-aligned stages
constexpr size_t kOSmem = kStageBytes, kGuSmem = kStageBytes + kHidden * 2;

struct Row {  // the norm's inputs and outputs (one decode row)
  float* partials;            // [kRanges][kHidden]: o's split-K partials
  const __nv_bfloat16* res;   // [kHidden] the residual before
  const __nv_bfloat16* w;     // [kHidden] the norm weight
  __nv_bfloat16* res_out;     // [kHidden] the residual after
  __nv_bfloat16* x;           // [kHidden] the normalized row (the norm kernel's output)
  __nv_bfloat16* act;         // [kInter] gate/up's output
};

__device__ __forceinline__ void dep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void dep_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The producer of one CTA: `n` tiles of 8 KB from `w` into the stages; the first kPrewait before the wait on
// the previous grid; the next grid let in once the last is requested.
__device__ __forceinline__ void produce(const unsigned char* w, int n, unsigned char* sw, uint64_t* full,
                                        uint64_t* empty) {
  const uint64_t policy = rill::cuda::l2_evict_first_policy();
  for (int i = 0; i < n; ++i) {
    const int s = i % kStages;
    if (i == kPrewait) dep_wait();
    if (i >= kStages) mbar_wait(&empty[s], unsigned((i / kStages) - 1) & 1u);
    mbar_arrive_expect_tx(&full[s], kTile);
    bulk_load(sw + s * kTile, w + size_t(i) * kTile, kTile, &full[s], policy);
  }
  if (n <= kPrewait) dep_wait();
  dep_trigger();
}

// The consumer: each stage waited for, touched and released (no arithmetic).
__device__ __forceinline__ uint32_t consume(int n, const unsigned char* sw, uint64_t* full, uint64_t* empty) {
  uint32_t acc = 0;
  for (int i = 0; i < n; ++i) {
    const int s = i % kStages;
    mbar_wait(&full[s], unsigned(i / kStages) & 1u);
    acc ^= *reinterpret_cast<const uint32_t*>(sw + s * kTile + (i & 7) * 128);
    mbar_arrive(&empty[s]);
  }
  return acc;
}

__device__ __forceinline__ unsigned char* aligned_stages(unsigned char* smem_raw) {
  return smem_raw + ((1024 - (smem_addr(smem_raw) & 1023u)) & 1023u);
}

// The projection before the norm (o: kKT 64, down: kKT 192): item = range · 64 + tile (one a CTA, 256 CTAs);
// its x slice (the attention's or SwiGLU's output) loaded after the wait, its kKT / 4 k tiles streamed, 64
// partials written to its range's row.
template <int kKT>
__global__ void __launch_bounds__(64) split_kernel(const unsigned char* w, Row row, const __nv_bfloat16* in) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int n = kKT / kRanges;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages], xbar;
  __shared__ __align__(16) __nv_bfloat16 x_s[n * 64];
  unsigned char* sw = aligned_stages(smem_raw);
  const int tile = int(blockIdx.x) % kOTiles, range = int(blockIdx.x) / kOTiles;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], 1);
    mbar_init(&xbar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    produce(w + (size_t(tile) * kKT + size_t(range) * n) * kTile, n, sw, full, empty);
  } else if (threadIdx.x == 32) {
    dep_wait();
    mbar_arrive_expect_tx(&xbar, sizeof(x_s));
    bulk_load(x_s, in + range * n * 64, sizeof(x_s), &xbar, rill::cuda::l2_evict_first_policy());
    mbar_wait(&xbar, 0);
    uint32_t acc = consume(n, sw, full, empty) ^ *reinterpret_cast<const uint32_t*>(x_s);
    const float v = float(acc & 255u) * 1e-3f;
    float* p = row.partials + size_t(range) * kHidden + tile * 64;
    for (int j = 0; j < 64; j += 4) *reinterpret_cast<float4*>(p + j) = make_float4(v, v, v, v);
  }
#endif
}

// Today's add + RMSNorm: a cluster of 8 blocks of 64 threads, 8 elements a thread (rms_norm_cluster_kernel's
// shape): weights before the wait, the next launch let in before it, the partials folded into the residual,
// the warps' sums pushed to every block by st.async, x and the new residual stored.
__global__ void __launch_bounds__(64) norm_kernel(Row row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kC = 8, kWarps = kHidden / 8 / 32;  // 16 warps a row
  __shared__ float sums[kWarps];
  __shared__ __align__(8) uint64_t bar;
  const int rank = int(blockIdx.x), lane = int(threadIdx.x & 31), t = rank * 64 + int(threadIdx.x);
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    mbar_init_fence();
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  const int c0 = t * 8;
  const uint4 wv = *reinterpret_cast<const uint4*>(row.w + c0);
  dep_trigger();
  dep_wait();
  float r[8], ss = 0.f;
  const uint4 rv = *reinterpret_cast<const uint4*>(row.res + c0);
  const __nv_bfloat16* rb = reinterpret_cast<const __nv_bfloat16*>(&rv);
#pragma unroll
  for (int j = 0; j < 8; ++j) r[j] = __bfloat162float(rb[j]);
#pragma unroll
  for (int g = 0; g < kRanges; ++g) {
    const float4 a = *reinterpret_cast<const float4*>(row.partials + size_t(g) * kHidden + c0);
    const float4 b = *reinterpret_cast<const float4*>(row.partials + size_t(g) * kHidden + c0 + 4);
    r[0] += a.x, r[1] += a.y, r[2] += a.z, r[3] += a.w, r[4] += b.x, r[5] += b.y, r[6] += b.z, r[7] += b.w;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += r[j] * r[j];
  ss = warp_sum(ss);
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  if (lane < kC) st_async_cluster(smem_addr(&sums[t / 32]), smem_addr(&bar), lane, ss);
  if (threadIdx.x == 0) mbar_arrive_expect_tx(&bar, unsigned(kWarps * sizeof(float)));
  mbar_wait(&bar, 0);
  ss = warp_sum(lane < kWarps ? sums[lane] : 0.f);
  const float inv = rsqrtf(ss / float(kHidden) + 1e-6f);
  const __nv_bfloat16* wb = reinterpret_cast<const __nv_bfloat16*>(&wv);
  __align__(16) __nv_bfloat16 xo[8], ro[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    ro[j] = __float2bfloat16_rn(r[j]);
    xo[j] = __float2bfloat16_rn(__bfloat162float(ro[j]) * inv * __bfloat162float(wb[j]));
  }
  *reinterpret_cast<uint4*>(row.x + c0) = *reinterpret_cast<const uint4*>(xo);
  *reinterpret_cast<uint4*>(row.res_out + c0) = *reinterpret_cast<const uint4*>(ro);
#endif
}

// The projection after the norm. Gate/up (!kQkv): column tile blockIdx.x walking all 64 k tiles (384 CTAs).
// Q/k/v (kQkv): 96 column tiles × 4 split ranges, CTA 4 · tile + range walking its range's 16 k tiles and
// needing x over that range only. Warp 0's thread 0 produces; warps 1-4 get x and thread 32 consumes.
// kC == 0: no x at all (a bound); kC == 1: x (its part) loaded after the wait (today, after the norm kernel);
// kC ≥ 2: clusters of kC CTAs doing the norm in a prologue over a share of the row — gate/up: kHidden / kC
// columns each, the normalized share pushed to the cluster's other CTAs; q/k/v (kC == 4, rank = range): its
// own range, nothing but the warps' sums exchanged. The first cluster also stores the new residual.
template <int kC, bool kQkv>
__global__ void __launch_bounds__(32 + kProThreads) next_kernel(const unsigned char* w, Row row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(!kQkv || kC <= 1 || kC == kRanges, "q/k/v's clusters are a tile's ranges");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages], xbar, sbar;
  constexpr int kProWarps = kProThreads / 32, kSumSlots = kC > 1 ? kC * kProWarps : 1;
  constexpr int kN = kQkv ? kKTiles / kRanges : kKTiles;       // k tiles a CTA
  constexpr int kXCols = kQkv ? kHidden / kRanges : kHidden;  // x columns a CTA needs
  __shared__ float sums[kSumSlots];
  unsigned char* sw = aligned_stages(smem_raw);
  __nv_bfloat16* x_s = reinterpret_cast<__nv_bfloat16*>(sw + kStages * kTile);
  const int tile = kQkv ? int(blockIdx.x) / kRanges : int(blockIdx.x);
  const int range = kQkv ? int(blockIdx.x) % kRanges : 0, x0 = range * kXCols;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], 1);
    mbar_init(&xbar, 1);
    mbar_init(&sbar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if constexpr (kC > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) produce(w + (size_t(tile) * kKTiles + size_t(range) * kN) * kTile, kN, sw, full, empty);
    __syncwarp();
    if constexpr (kC > 1) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    return;
  }
  const int p = int(threadIdx.x) - 32;  // the prologue's thread
  if constexpr (kC == 1) {
    if (p == 0) {
      dep_wait();
      mbar_arrive_expect_tx(&xbar, kXCols * 2);
      bulk_load(x_s, row.x + x0, kXCols * 2, &xbar, rill::cuda::l2_evict_first_policy());
      mbar_wait(&xbar, 0);
    }
  } else if constexpr (kC > 1) {
    constexpr int kShare = kHidden / kC, kPer = kShare / kProThreads;  // columns a CTA, a thread
    static_assert(kPer % 4 == 0 && kPer <= 16, "whole float4s of partials a thread");
    const int rank = int(blockIdx.x % kC), lane = p & 31, warp = p / 32;
    const int c0 = rank * kShare + p * kPer;  // (q/k/v: rank = range, so c0 - x0 = p · kPer)
    float wf[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) wf[j] = __bfloat162float(row.w[c0 + j]);  // before the wait, as the norm
    dep_wait();
    float r[kPer], ss = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) r[j] = __bfloat162float(row.res[c0 + j]);
#pragma unroll
    for (int g = 0; g < kRanges; ++g)
#pragma unroll
      for (int j = 0; j < kPer; j += 4) {
        const float4 a = *reinterpret_cast<const float4*>(row.partials + size_t(g) * kHidden + c0 + j);
        r[j] += a.x, r[j + 1] += a.y, r[j + 2] += a.z, r[j + 3] += a.w;
      }
#pragma unroll
    for (int j = 0; j < kPer; ++j) ss += r[j] * r[j];
    ss = warp_sum(ss);
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every CTA's barriers are initialized
    if (lane < kC) st_async_cluster(smem_addr(&sums[rank * kProWarps + warp]), smem_addr(&sbar), lane, ss);
    if (p == 0) {
      mbar_arrive_expect_tx(&sbar, unsigned(kSumSlots * sizeof(float)));
      if constexpr (!kQkv) mbar_arrive_expect_tx(&xbar, unsigned((kC - 1) * kShare * 2));
    }
    mbar_wait(&sbar, 0);
    float total = 0.f;
    for (int i = 0; i < kSumSlots; ++i) total += sums[i];
    const float inv = rsqrtf(total / float(kHidden) + 1e-6f);
    __align__(16) __nv_bfloat16 xo[kPer], ro[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      ro[j] = __float2bfloat16_rn(r[j]);
      xo[j] = __float2bfloat16_rn(__bfloat162float(ro[j]) * inv * wf[j]);
    }
    __nv_bfloat16* mine = x_s + (c0 - x0);
    const float4* xv = reinterpret_cast<const float4*>(xo);  // bf16 bits moved as f32 lanes
#pragma unroll
    for (int j = 0; j < kPer / 8; ++j) reinterpret_cast<float4*>(mine)[j] = xv[j];
    if constexpr (kPer % 8 != 0) *reinterpret_cast<float2*>(mine) = reinterpret_cast<const float2*>(xo)[0];
    if constexpr (!kQkv) {
      for (int q = 1; q < kC; ++q) {
        const int to = (rank + q) % kC;
        if constexpr (kPer % 8 == 0) {
#pragma unroll
          for (int j = 0; j < kPer / 8; ++j) st_async_cluster(smem_addr(mine + 8 * j), smem_addr(&xbar), to, xv[j]);
        } else {
          st_async_cluster(smem_addr(mine), smem_addr(&xbar), to, reinterpret_cast<const float2*>(xo)[0]);
        }
      }
    }
    if (blockIdx.x < unsigned(kC))
#pragma unroll
      for (int j = 0; j < kPer; ++j) row.res_out[c0 + j] = ro[j];
    if constexpr (!kQkv) mbar_wait(&xbar, 0);
    asm volatile("bar.sync 1, %0;" ::"n"(kProThreads) : "memory");  // every thread's own share in x_s
  } else {
    if (p == 0) dep_wait();
  }
  if (p == 0) {
    const uint32_t acc = consume(kN, sw, full, empty) ^ *reinterpret_cast<const uint16_t*>(x_s + tile % 64);  // one bf16's bits
    row.act[(tile * kRanges + range) % kInter] = __float2bfloat16_rn(float(acc & 255u));
  }
#endif
}

cudaLaunchConfig_t pdl_config(unsigned grid, unsigned threads, size_t smem, cudaStream_t s, cudaLaunchAttribute* attr,
                              int cluster) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  attr[0] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cluster > 1) {
    attr[1] = {};
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = unsigned(cluster);
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
  }
  return cfg;
}

constexpr int kNextCtas = kGuTiles;  // gate/up: 384 column tiles; q/k/v: 96 column tiles × 4 ranges
static_assert(kGuTiles == (6144 / 64) * kRanges, "the two next projections launch alike");

template <int kC, bool kQkv>
void launch_next(const unsigned char* w, const Row& row) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = pdl_config(kNextCtas, 32 + kProThreads, kGuSmem, nullptr, attr, kC);
  CK(cudaLaunchKernelEx(&cfg, next_kernel<kC, kQkv>, w, row));
}

// CTAs an SM (kC < 2) or clusters resident at once (kC ≥ 2) of next_kernel<kC, kQkv>.
template <int kC, bool kQkv>
int resident() {
  CK(cudaFuncSetAttribute(next_kernel<kC, kQkv>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGuSmem)));
  if constexpr (kC < 2) {
    int blocks = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, next_kernel<kC, kQkv>, 32 + kProThreads, kGuSmem));
    return blocks;
  } else {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = rill::probe::cluster_launch(kNextCtas / kC, kC, 32 + kProThreads, kGuSmem, attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, next_kernel<kC, kQkv>, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;  // unknown: launched anyway
    }
    return clusters;
  }
}

template <int kKT>
void launch_split(const unsigned char* w, const Row& row, const __nv_bfloat16* in) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = pdl_config(kOTiles * kRanges, 64, kOSmem, nullptr, attr, 1);
  CK(cudaLaunchKernelEx(&cfg, split_kernel<kKT>, w, row, in));
}

void launch_norm(const Row& row) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = pdl_config(8, 64, 0, nullptr, attr, 8);
  CK(cudaLaunchKernelEx(&cfg, norm_kernel, row));
}

// Chain modes: the norm kernel then x loaded; x loaded with no norm; the norm fused on clusters of 2 / 4 / 8;
// the streams alone (no x at all).
enum Mode { kToday = -1, kLeaveOut = 0, kFused2 = 2, kFused4 = 4, kFused8 = 8, kStreams = 100 };

template <bool kQkv>
void launch_next_mode(int mode, const unsigned char* w, const Row& row) {
  if (mode == kToday || mode == kLeaveOut) launch_next<1, kQkv>(w, row);
  else if (mode == kStreams) launch_next<0, kQkv>(w, row);
  else if (mode == kFused4) launch_next<4, kQkv>(w, row);
  else if constexpr (!kQkv) {
    if (mode == kFused2) launch_next<2, kQkv>(w, row);
    else launch_next<8, kQkv>(w, row);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  const int sms = rill::probe::device_sms(prop);
  constexpr size_t kKt = kTile;
  const size_t o_bytes = size_t(kOTiles) * kKTiles * kKt, gu_bytes = size_t(kGuTiles) * kKTiles * kKt;
  const size_t down_bytes = size_t(kOTiles) * (kInter / 64) * kKt, qkv_bytes = size_t(6144 / 64) * kKTiles * kKt;
  unsigned char *w_o, *w_gu, *w_down, *w_qkv;
  for (auto [ptr, bytes] : {std::pair{&w_o, o_bytes}, std::pair{&w_gu, gu_bytes}, std::pair{&w_down, down_bytes},
                            std::pair{&w_qkv, qkv_bytes}}) {
    CK(cudaMalloc(ptr, bytes * kLayers));
    CK(cudaMemset(*ptr, 1, bytes * kLayers));
  }
  Row row{};
  __nv_bfloat16 *res, *nw, *attn, *act_in;
  CK(cudaMalloc(&row.partials, sizeof(float) * kRanges * kHidden));
  CK(cudaMalloc(&res, 2 * kHidden));
  CK(cudaMalloc(&nw, 2 * kHidden));
  CK(cudaMalloc(&attn, 2 * kHidden));
  CK(cudaMalloc(&act_in, 2 * kInter));
  CK(cudaMalloc(&row.res_out, 2 * kHidden));
  CK(cudaMalloc(&row.x, 2 * kHidden));
  CK(cudaMalloc(&row.act, 2 * kInter));
  for (void* z : {static_cast<void*>(res), static_cast<void*>(nw), static_cast<void*>(attn)})
    CK(cudaMemset(z, 0, 2 * kHidden));
  CK(cudaMemset(act_in, 0, 2 * kInter));
  row.res = res;
  row.w = nw;
  const size_t flush_bytes = size_t(256) << 20;
  void* flush;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaFuncSetAttribute(split_kernel<kKTiles>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kOSmem)));
  CK(cudaFuncSetAttribute(split_kernel<kInter / 64>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kOSmem)));

  int gu_res[9] = {}, qkv_res[9] = {};
  gu_res[0] = resident<0, false>(), gu_res[1] = resident<1, false>(), gu_res[2] = resident<2, false>();
  gu_res[4] = resident<4, false>(), gu_res[8] = resident<8, false>();
  qkv_res[0] = resident<0, true>(), qkv_res[1] = resident<1, true>(), qkv_res[4] = resident<4, true>();
  std::printf("device %s, %d SMs; %d layers of [o -> (norm) -> gate/up] and of [down -> (norm) -> q/k/v]; o / down:"
              " %d CTAs, gate/up / q/k/v: %d CTAs of %zu KB\n",
              prop.name, sms, kLayers, kOTiles * kRanges, kNextCtas, kGuSmem / 1024);
  std::printf("residency: %d CTAs an SM without clusters; clusters at once, gate/up c=2 %d, c=4 %d, c=8 %d; q/k/v "
              "c=4 %d (one wave needs %d / %d / %d)\n",
              gu_res[1], gu_res[2], gu_res[4], gu_res[8], qkv_res[4], kNextCtas / 2, kNextCtas / 4, kNextCtas / 8);

  struct Case {
    const char* name;
    int mode;
  };
  const Case cases[] = {{"norm (today)", kToday}, {"none (leave-out)", kLeaveOut}, {"fused c=2", kFused2},
                        {"fused c=4", kFused4},    {"fused c=8", kFused8},         {"streams alone", kStreams}};
  for (const bool qkv : {false, true}) {
    const double bytes = double(qkv ? down_bytes + qkv_bytes : o_bytes + gu_bytes);
    const int* res_of = qkv ? qkv_res : gu_res;
    std::printf("\n%s\n%-20s %12s %12s %14s %10s\n", qkv ? "down -> (norm) -> q/k/v" : "o -> (norm) -> gate/up",
                "chain", "us a layer", "vs today", "36x us", "TB/s");
    for (int rep = 0; rep < 2; ++rep) {
      double base = 0;
      for (const Case& c : cases) {
        if (qkv && (c.mode == kFused2 || c.mode == kFused8)) continue;
        if (c.mode >= kFused2 && c.mode <= kFused8 && res_of[c.mode] == 0) {  // cannot be placed: no launch
          std::printf("%-20s (clusters of %d do not fit)\n", c.name, c.mode);
          continue;
        }
        auto run = [&] {
          for (int l = 0; l < kLayers; ++l) {
            if (qkv) launch_split<kInter / 64>(w_down + down_bytes * l, row, act_in);
            else launch_split<kKTiles>(w_o + o_bytes * l, row, attn);
            if (c.mode == kToday) launch_norm(row);
            if (qkv) launch_next_mode<true>(c.mode, w_qkv + qkv_bytes * l, row);
            else launch_next_mode<false>(c.mode, w_gu + gu_bytes * l, row);
          }
        };
        const double us = rill::probe::median_us(run, flush, flush_bytes) / kLayers;
        if (c.mode == kToday) base = us;
        std::printf("%-20s %12.2f %12.2f %14.1f %10.2f\n", c.name, us, us - base, (base - us) * 36,
                    bytes / us / 1e6);
      }
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
