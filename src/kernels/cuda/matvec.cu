// kernels/cuda/matvec.cu — skinny GEMM y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias) for m ≤ 8, the
// decode-time projection. It is bound by reading w once: one warp per output column n streams
// w[n, :] with 16-byte loads (several in flight per thread, L1 bypassed) while x (tiny, shared
// by all warps) is read through the cache. When n is too small to fill the GPU the k range is
// split over blocks; each split writes f32 partials and a second kernel adds them in a fixed
// order (deterministic), adds the bias and rounds once to bf16.
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  float2 w0 = bf16x2_to_float2(w.x), w1 = bf16x2_to_float2(w.y), w2 = bf16x2_to_float2(w.z),
         w3 = bf16x2_to_float2(w.w);
  float2 x0 = bf16x2_to_float2(x.x), x1 = bf16x2_to_float2(x.y), x2 = bf16x2_to_float2(x.z),
         x3 = bf16x2_to_float2(x.w);
  float s = w0.x * x0.x;
  s = fmaf(w0.y, x0.y, s);
  s = fmaf(w1.x, x1.x, s);
  s = fmaf(w1.y, x1.y, s);
  s = fmaf(w2.x, x2.x, s);
  s = fmaf(w2.y, x2.y, s);
  s = fmaf(w3.x, x3.x, s);
  s = fmaf(w3.y, x3.y, s);
  return s;
}

// kRows consecutive output columns per warp share every x load (x is re-read from L1 M times per
// weight vector otherwise, which caps M = 8 far below HBM bandwidth); kRows * kUnroll 16-byte
// weight loads are in flight per lane.
template <int M, int kRows, int kUnroll>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) matvec_kernel(MatvecArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t n0 = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * kRows;
  if (n0 >= a.n) return;
  const int64_t kv = a.k / 8;  // 16-byte vectors per row
  const int64_t per_split = (kv + a.splits - 1) / a.splits;
  const int64_t kb = int64_t(blockIdx.y) * per_split;
  const int64_t ke = min(kv, kb + per_split);
  const uint4* w[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) w[r] = static_cast<const uint4*>(a.w) + min(n0 + r, a.n - 1) * kv;
  const uint4* x = static_cast<const uint4*>(a.x);
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  const uint64_t evict_first = l2_evict_first_policy();  // the weights: read once a step
  int64_t v = kb + lane;
  for (; v + 32 * (kUnroll - 1) < ke; v += 32 * kUnroll) {
    uint4 wv[kRows][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kRows; ++r) wv[r][u] = load_stream16(w[r] + v + 32 * u, evict_first);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        uint4 xv = __ldg(x + m * kv + v + 32 * u);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][m] += dot8(wv[r][u], xv);
      }
    }
  }
  for (; v < ke; v += 32) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wv[r] = load_stream16(w[r] + v, evict_first);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      uint4 xv = __ldg(x + m * kv + v);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r][m] += dot8(wv[r], xv);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t n = n0 + r;
    if (n >= a.n) break;
    if (a.splits == 1) {
      float b = a.bias ? __bfloat162float(static_cast<const bf16*>(a.bias)[n]) : 0.f;
      bf16* y = static_cast<bf16*>(a.y);
#pragma unroll
      for (int m = 0; m < M; ++m) y[m * a.n + n] = __float2bfloat16_rn(acc[r][m] + b);
    } else {
#pragma unroll
      for (int m = 0; m < M; ++m) a.workspace[(int64_t(blockIdx.y) * M + m) * a.n + n] = acc[r][m];
    }
  }
}

__global__ void matvec_reduce_kernel(const float* ws, const bf16* bias, bf16* y, int m, int64_t n, int splits) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(m) * n) return;
  int64_t col = i % n;
  float s = 0.f;
  for (int p = 0; p < splits; ++p) s += ws[int64_t(p) * m * n + i];
  if (bias) s += __bfloat162float(bias[col]);
  y[i] = __float2bfloat16_rn(s);
}

template <int M>
void launch_m(const MatvecArgs& a, cudaStream_t stream) {
  constexpr int kRows = M == 1 ? 1 : M <= 3 ? 2 : 4;
  constexpr int kUnroll = 8 / kRows;
  dim3 grid(ceil_div(a.n, int64_t(kWarpsPerBlock) * kRows), unsigned(a.splits));
  matvec_kernel<M, kRows, kUnroll><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(a);
  RILL_CUDA_CHECK_LAUNCH();
  if (a.splits > 1) {
    int64_t total = int64_t(a.m) * a.n;
    matvec_reduce_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(a.workspace, static_cast<const bf16*>(a.bias),
                                                                   static_cast<bf16*>(a.y), a.m, a.n, a.splits);
    RILL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

int matvec_default_splits(int64_t n, int64_t k, int num_sms) {
  // About 48 resident warps per SM keep enough 16-byte loads in flight to cover HBM latency.
  int64_t target_warps = int64_t(num_sms) * 48;
  if (n >= target_warps) return 1;
  int64_t splits = (target_warps + n - 1) / n;
  int64_t max_splits = std::max<int64_t>(1, k / 8 / 256);  // each split streams ≥ 4 KiB per row
  return int(std::min<int64_t>({splits, max_splits, 16}));
}

void launch_matvec(const MatvecArgs& a, cudaStream_t stream) {
  if (a.n == 0 || a.m == 0) return;
  if (a.splits > 1 && !a.workspace) throw_error("[matmul] split-K matvec needs a workspace");
  switch (a.m) {
    case 1: launch_m<1>(a, stream); return;
    case 2: launch_m<2>(a, stream); return;
    case 3: launch_m<3>(a, stream); return;
    case 4: launch_m<4>(a, stream); return;
    case 5: launch_m<5>(a, stream); return;
    case 6: launch_m<6>(a, stream); return;
    case 7: launch_m<7>(a, stream); return;
    case 8: launch_m<8>(a, stream); return;
    default: throw_error("[matmul] matvec handles 1..8 rows");
  }
}

}  // namespace rill::cuda
