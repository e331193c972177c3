// kernels/cuda/rms_norm.cu — rms_norm and the fused add_rms_norm (bf16 activations).
// Rounding follows NormParams exactly: Llama/Qwen3 round x̂ to bf16, then multiply by the bf16
// weight and round again; scale_in_fp32 multiplies in f32 and rounds once; one_plus_weight
// uses (1 + w). The mean of squares is taken in f32 over the (rounded) input row.
// One warp per row for short rows (per-head q/k norms), one block per row otherwise — or, while the
// rows are few (decode), a cluster of blocks per row with the same operations. Each element is read
// and written by the same thread in both passes, so x and y may alias.
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/partials.cuh"

namespace rill::cuda {
namespace {

template <typename W>
struct NormKernelArgs {
  const bf16* x;
  bf16* residual;
  const W* w;
  bf16* y;
  int64_t rows, dim;
  float eps;
  bool one_plus, fp32_scale;
  bool early_trigger;  // pdl_norm_early_trigger()
  PartialsIn xp;       // x still as partials (the register path only; x receives the folded row)
};

template <typename W>
__device__ __forceinline__ float norm_out_at(float xhat, const W* w, int64_t c, bool one_plus, bool fp32_scale) {
  return norm_out(xhat, to_float(w[c]), one_plus, fp32_scale);
}

// The register path's steps (kHold vectors of 8 a thread, thread t of a row of kStride threads holding
// elements (t + h · kStride) · 8 ...): its weight vectors, requested before the wait; its row's vectors
// — x (or the deferred product's fold, also stored as x) plus the residual, which it stores back — and
// its share of the sum of squares; and the normalized output. rms_norm_kernel and rms_norm_cluster_kernel
// run the same steps, so their bits are the same.
template <typename W, int kStride, int kHold>
__device__ __forceinline__ void hold_weights(const NormKernelArgs<W>& a, int t, W (&wv)[kHold][8]) {
  constexpr int kWChunks = int(sizeof(W)) * 8 / 16;
#pragma unroll
  for (int h = 0; h < kHold; ++h) {
    const int64_t c = (int64_t(t) + int64_t(h) * kStride) * 8;
    if (c < a.dim)
#pragma unroll
      for (int j = 0; j < kWChunks; ++j)
        reinterpret_cast<uint4*>(wv[h])[j] = reinterpret_cast<const uint4*>(a.w + c)[j];
  }
}

template <typename W, int kStride, int kHold>
__device__ __forceinline__ float hold_row(const NormKernelArgs<W>& a, int64_t row, int t, uint4 (&v)[kHold]) {
  const bf16* x = a.x + row * a.dim;
  bf16* r = a.residual ? a.residual + row * a.dim : nullptr;
  uint4 rv[kHold];
#pragma unroll
  for (int h = 0; h < kHold; ++h) {
    const int64_t c = (int64_t(t) + int64_t(h) * kStride) * 8;
    if (c >= a.dim) continue;
    if (a.xp.ws) {  // a deferred GEMM product: its fold, and the row it would have written
      v[h] = folded8(a.xp, row, c);
      *reinterpret_cast<uint4*>(const_cast<bf16*>(x) + c) = v[h];
    } else {
      v[h] = *reinterpret_cast<const uint4*>(x + c);
    }
    if (r) rv[h] = *reinterpret_cast<const uint4*>(r + c);
  }
  float ss = 0.f;
#pragma unroll
  for (int h = 0; h < kHold; ++h) {
    const int64_t c = (int64_t(t) + int64_t(h) * kStride) * 8;
    if (c >= a.dim) continue;
    bf16* e = reinterpret_cast<bf16*>(&v[h]);
    if (r) {
      const bf16* re = reinterpret_cast<const bf16*>(&rv[h]);
#pragma unroll
      for (int i = 0; i < 8; ++i) e[i] = __float2bfloat16_rn(__bfloat162float(re[i]) + __bfloat162float(e[i]));
      *reinterpret_cast<uint4*>(r + c) = v[h];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float f = __bfloat162float(e[i]);
      ss += f * f;
    }
  }
  return ss;
}

template <typename W, int kStride, int kHold>
__device__ __forceinline__ void store_held(const NormKernelArgs<W>& a, int64_t row, int t, float inv, uint4 (&v)[kHold],
                                           const W (&wv)[kHold][8]) {
  bf16* y = a.y + row * a.dim;
#pragma unroll
  for (int h = 0; h < kHold; ++h) {
    const int64_t c = (int64_t(t) + int64_t(h) * kStride) * 8;
    if (c >= a.dim) continue;
    bf16* e = reinterpret_cast<bf16*>(&v[h]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float xhat = __bfloat162float(e[i]) * inv;
      e[i] = __float2bfloat16_rn(norm_out(xhat, to_float(wv[h][i]), a.one_plus, a.fp32_scale));
    }
    *reinterpret_cast<uint4*>(y + c) = v[h];
  }
}

// kVec elements per access (8: 16-byte loads; 1: scalar). kRowThreads threads per row.
// kHold > 0 (16-byte aligned rows and weight, dim ≤ kHold · kRowThreads · 8): each thread keeps its
// ≤ kHold vectors of the row in registers between the two passes, and its weight vectors are
// requested before the wait (constant data, launch.h), so the kernel makes one dependent memory
// round trip after its predecessor instead of three (x and r; r again; w). In a batch-1 decode
// step that round trip waits behind the next GEMM's weight stream: ~4 µs each. Same operations
// in the same order as the two-pass loop below.
template <typename W, int kVec, int kRowThreads, int kHold>
__global__ void rms_norm_kernel(const __grid_constant__ NormKernelArgs<W> a) {
  __shared__ float scratch[32];
  int64_t row = kRowThreads == 32 ? int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32 : blockIdx.x;
  int t = kRowThreads == 32 ? (threadIdx.x & 31) : threadIdx.x;
  if constexpr (kHold > 0) {
    static_assert(kVec == 8, "the register path moves 16-byte vectors");
    W wv[kHold][kVec];
    warm_params(a);
    hold_weights<W, kRowThreads, kHold>(a, t, wv);
    pdl_wait_trigger(a.early_trigger);
    if (kRowThreads == 32 && row >= a.rows) return;
    uint4 v[kHold];
    float ss = hold_row<W, kRowThreads, kHold>(a, row, t, v);
    pdl_trace_mark(1);  // (trace builds: thread 0's loads have landed)
    ss = kRowThreads == 32 ? warp_sum(ss) : block_sum(ss, scratch);
    pdl_trace_mark(2);  // (the row's sum of squares)
    store_held<W, kRowThreads, kHold>(a, row, t, rsqrtf(ss / float(a.dim) + a.eps), v, wv);
    pdl_trace_done();
    return;
  }
  pdl_wait_trigger(a.early_trigger);
  if (kRowThreads == 32 && row >= a.rows) return;
  const bf16* x = a.x + row * a.dim;
  bf16* r = a.residual ? a.residual + row * a.dim : nullptr;
  bf16* y = a.y + row * a.dim;
  float ss = 0.f;
  for (int64_t c = int64_t(t) * kVec; c < a.dim; c += int64_t(kRowThreads) * kVec) {
    bf16 v[kVec];
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(x + c);
    } else {
      v[0] = x[c];
    }
    if (r) {
      bf16 rv[kVec];
      if constexpr (kVec == 8) {
        *reinterpret_cast<uint4*>(rv) = *reinterpret_cast<const uint4*>(r + c);
      } else {
        rv[0] = r[c];
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = __float2bfloat16_rn(__bfloat162float(rv[i]) + __bfloat162float(v[i]));
      if constexpr (kVec == 8) {
        *reinterpret_cast<uint4*>(r + c) = *reinterpret_cast<uint4*>(v);
      } else {
        r[c] = v[0];
      }
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float f = __bfloat162float(v[i]);
      ss += f * f;
    }
  }
  ss = kRowThreads == 32 ? warp_sum(ss) : block_sum(ss, scratch);
  float inv = rsqrtf(ss / float(a.dim) + a.eps);
  const bf16* src = r ? r : x;
  for (int64_t c = int64_t(t) * kVec; c < a.dim; c += int64_t(kRowThreads) * kVec) {
    bf16 v[kVec];
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(src + c);
    } else {
      v[0] = src[c];
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      v[i] = __float2bfloat16_rn(norm_out_at(__bfloat162float(v[i]) * inv, a.w, c + i, a.one_plus, a.fp32_scale));
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(y + c) = *reinterpret_cast<uint4*>(v);
    } else {
      y[c] = v[0];
    }
  }
}

// rms_norm_kernel's register path (kVec 8, a block of kBlock threads a row) on a cluster of kC blocks a
// row: block `rank` runs threads [rank · kBlock / kC, ...) of the one-block kernel, each with the same
// elements and the same operations; the row's sum of squares is block_sum's — each warp's warp_sum, then
// the kBlock / 32 warp sums added by warp_sum in warp order — with every warp's sum pushed into every
// block's `sums` by st.async (no release fence: under the decode weight stream one waits for the SM's
// copies in flight, bench/RESULTS.md run AE). The receivers' barriers are published by a relaxed
// cluster arrive before the wait on the previous kernel and awaited only before the pushes. A block
// leaves once all kC · warps sums have landed in it; nobody reads its shared memory after that.
template <typename W, int kBlock, int kC, int kHold>
__global__ void __launch_bounds__(kBlock / kC) rms_norm_cluster_kernel(const __grid_constant__ NormKernelArgs<W> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kVec = 8, kThreads = kBlock / kC, kWarps = kBlock / 32;
  static_assert(kThreads % 32 == 0 && kWarps <= 32, "whole warps a block, at most 32 a row");
  __shared__ float sums[kWarps];
  __shared__ __align__(8) uint64_t bar;
  const int rank = int(blockIdx.x % kC), lane = int(threadIdx.x & 31);
  const int64_t row = blockIdx.x / kC;
  const int t = rank * kThreads + int(threadIdx.x);  // the one-block kernel's thread
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    mbar_init_fence();
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  W wv[kHold][kVec];
  warm_params(a);
  hold_weights<W, kBlock, kHold>(a, t, wv);
  pdl_wait_trigger(a.early_trigger);
  uint4 v[kHold];
  float ss = hold_row<W, kBlock, kHold>(a, row, t, v);
  pdl_trace_mark(1);
  ss = warp_sum(ss);
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every block's barrier is initialized
  // Lane j < kC of each warp pushes the warp's sum to block j, at the warp's index in the row.
  const int warp = t / 32;
  if (lane < kC) st_async_cluster(smem_addr(&sums[warp]), smem_addr(&bar), lane, ss);
  if (threadIdx.x == 0) mbar_arrive_expect_tx(&bar, unsigned(kWarps * sizeof(float)));
  mbar_wait(&bar, 0);
  ss = warp_sum(lane < kWarps ? sums[lane] : 0.f);
  pdl_trace_mark(2);
  store_held<W, kBlock, kHold>(a, row, t, rsqrtf(ss / float(a.dim) + a.eps), v, wv);
  pdl_trace_done();
#endif
}

int g_norm_cluster = -1;  // set_norm_cluster: -1 the rule of norm_cluster_for, else that many blocks
int g_norm_sms = 132;

// Blocks a row: `forced` when set (0: one block); else 8, 4 or 2 while the rows' clusters fit one
// wave of the SMs (batch-1 decode 243.2 / 243.3 tok/s with 8 against 238.9 / 239.2 with one block at
// 512 keys, 220.5 / 220.6 against 217.1 / 217.0 at 8,192; bench/RESULTS.md run AH), one block beyond.
int norm_cluster_for(int64_t rows, int forced, int sms) { return forced >= 0 ? forced : row_cluster_blocks(rows, sms); }

// Clusters of 16 are beyond the portable size: allowed once for the 16-block kernel of weight type W.
template <typename W, int kBlock, int kHold>
void allow_cluster16() {
  static const bool done = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(rms_norm_cluster_kernel<W, kBlock, 16, kHold>,
                                         cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return true;
  }();
  (void)done;
}

template <typename W>
void launch_typed(const RmsNormArgs& a, cudaStream_t stream) {
  NormKernelArgs<W> k{static_cast<const bf16*>(a.x), static_cast<bf16*>(a.residual), static_cast<const W*>(a.w),
                      static_cast<bf16*>(a.y), a.rows, a.dim, a.eps, a.one_plus_weight, a.scale_in_fp32,
                      pdl_norm_early_trigger(), {}};
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool vec = a.dim % 8 == 0 && aligned(a.x) && aligned(a.y) && (!a.residual || aligned(a.residual));
  constexpr int kRowsPerBlock = 8, kBlock = 512, kWarpHold = 4, kBlockHold = 2;
  // The register path (rms_norm_kernel's kHold): a warp a row up to 1024, a block up to kBlockHold · kBlock · 8.
  const bool hold = vec && aligned(a.w) && (a.dim <= 1024 || a.dim <= int64_t(kBlockHold) * kBlock * 8);
  if (a.x_partials.ws) {  // a deferred product as x: folded on load by the register path, else first
    if (hold && partials_vec8(a.x_partials)) k.xp = a.x_partials;
    else launch_fold_into(a.x_partials, const_cast<void*>(a.x), a.rows, a.dim, stream);
  }
  if (a.dim <= 1024) {
    unsigned grid = ceil_div(a.rows, kRowsPerBlock);
    if (hold) launch_pdl(rms_norm_kernel<W, 8, 32, kWarpHold>, dim3(grid), dim3(32 * kRowsPerBlock), 0, stream, k);
    else if (vec) launch_pdl(rms_norm_kernel<W, 8, 32, 0>, dim3(grid), dim3(32 * kRowsPerBlock), 0, stream, k);
    else launch_pdl(rms_norm_kernel<W, 1, 32, 0>, dim3(grid), dim3(32 * kRowsPerBlock), 0, stream, k);
  } else if (const unsigned c = unsigned(norm_cluster_for(a.rows, g_norm_cluster, g_norm_sms)); hold && c > 0) {
    auto kernel = c == 2    ? rms_norm_cluster_kernel<W, kBlock, 2, kBlockHold>
                  : c == 4  ? rms_norm_cluster_kernel<W, kBlock, 4, kBlockHold>
                  : c == 8  ? rms_norm_cluster_kernel<W, kBlock, 8, kBlockHold>
                            : rms_norm_cluster_kernel<W, kBlock, 16, kBlockHold>;
    if (c == 16) allow_cluster16<W, kBlock, kBlockHold>();
    launch_pdl_cluster(kernel, dim3(unsigned(a.rows) * c), dim3(kBlock / c), 0, stream, dim3(c), k);
#if defined(RILL_PDL_TRACE)
    if (pdl_trace_twice("norm"))  // trace builds: the same launch again, its code warm (launch.h)
      launch_pdl_cluster(kernel, dim3(unsigned(a.rows) * c), dim3(kBlock / c), 0, stream, dim3(c), k);
#endif
  } else {
    const dim3 grid(unsigned(a.rows));
    if (hold) launch_pdl(rms_norm_kernel<W, 8, kBlock, kBlockHold>, grid, dim3(kBlock), 0, stream, k);
    else if (vec) launch_pdl(rms_norm_kernel<W, 8, kBlock, 0>, grid, dim3(kBlock), 0, stream, k);
    else launch_pdl(rms_norm_kernel<W, 1, kBlock, 0>, grid, dim3(kBlock), 0, stream, k);
  }
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void set_norm_cluster(int blocks, int num_sms) {
  g_norm_cluster = blocks;
  if (num_sms > 0) g_norm_sms = num_sms;
}
int norm_cluster() { return g_norm_cluster; }

void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (a.w_dtype == DType::bf16) launch_typed<bf16>(a, stream);
  else if (a.w_dtype == DType::f32) launch_typed<float>(a, stream);
  else throw_error("[rms_norm] weight dtype must be f32 or bf16");
}

}  // namespace rill::cuda
