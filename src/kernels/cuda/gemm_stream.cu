// kernels/cuda/gemm_stream.cu — the batch-invariant GEMM's streaming decode kernel (M ≤ 16,
// configurations 7 and 8): the weight goes from HBM straight into mma fragments, with the
// arithmetic of the tiled kernel in gemm.cu (its header states the invariant). Picked for M ≤ 8
// where the sm_90a warpgroup decode kernel (gemm_wgmma.cu) is not available or timed slower.
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"

namespace rill::cuda::gemm_detail {
namespace {

// Each warp owns 8 output columns (one n8 tile) and one split range, and walks the range in 32-k
// chunks: lane (g, t) loads 16 bytes, the weight row col0 + g at k = chunk + 8t, so one warp
// instruction reads 8 rows × 64 bytes; kChunks chunks make a batch (4 in both configurations:
// 128 k), and the next batch is requested before this one multiplies. A 4 × 4 transpose within each lane quad
// (4 shuffles) turns a lane's 8 consecutive k into its B fragments of the chunk's two 16-wide
// steps (k = 2t, 2t + 1, 2t + 8, 2t + 9 and the same + 16: the PTX layout ldmatrix produces in the
// tiled kernel), and the A fragments are read from x at the same k, so the mma instructions, their
// operands and their order are exactly the tiled kernel's: the same bits. A CTA of 8 warps holds
// 8 / S column groups × S ranges (S ≤ 8, a power of two, gemm_split); the warps' partials meet in
// shared memory and are added in range order, then the bias, then one rounding. No workspace, no
// counters, no second kernel. The first batch of weights is requested before the kernel waits
// for its predecessor (launch.h), so a launch's ramp-up overlaps the previous kernel's tail.
constexpr int kStreamWarps = 8;

// Lane t of a quad holds the pairs p = 0..3 of its 8 k (k = 8t + 2p); afterwards v[j] holds lane
// j's pair t (k = 8j + 2t). Two butterfly stages: swap the off-diagonal 2 × 2 blocks (lanes t ^ 2),
// then the off-diagonal elements within each block (lanes t ^ 1).
__device__ __forceinline__ void quad_transpose(uint32_t& v0, uint32_t& v1, uint32_t& v2, uint32_t& v3, int t) {
  const bool hi = t & 2;
  uint32_t s0 = hi ? v0 : v2, s1 = hi ? v1 : v3;
  uint32_t r0 = __shfl_xor_sync(0xffffffffu, s0, 2), r1 = __shfl_xor_sync(0xffffffffu, s1, 2);
  if (hi) {
    v0 = r0;
    v1 = r1;
  } else {
    v2 = r0;
    v3 = r1;
  }
  const bool odd = t & 1;
  s0 = odd ? v0 : v1;
  s1 = odd ? v2 : v3;
  r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
  r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
  if (odd) {
    v0 = r0;
    v2 = r1;
  } else {
    v1 = r0;
    v3 = r1;
  }
}

// mma_bf16_16816 without `volatile`: the compiler may hoist independent loads above it (the
// instruction has no side effect besides its outputs).
__device__ __forceinline__ void mma_bf16_16816_sched(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                     uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two bf16 of x (row already offset), or zeros for a row past M or k past the range's end.
__device__ __forceinline__ uint32_t x_pair(const bf16* row, int64_t k, bool ok) {
  return ok ? *reinterpret_cast<const uint32_t*>(row + k) : 0u;
}

// One 32-k chunk [k0, k0 + 32) of a warp's 8 columns: `w` is this lane's 16 bytes of weight row
// g at k0 + 8t, xa row g's A pairs at k0 + {0, 8, 16, 24} + 2t; rows g + 8 of x (M > 8) are read
// here. Steps wholly past the range's end ke are skipped.
template <bool kRows16>
__device__ __forceinline__ void stream_chunk(float (&acc)[4], uint4 w, const uint32_t (&xa)[4], const bf16* x1,
                                             bool ok1, int64_t k0, int64_t ke, int t) {
  uint32_t b0 = w.x, b1 = w.y, b2 = w.z, b3 = w.w;
  quad_transpose(b0, b1, b2, b3, t);
  const bool h0 = k0 + 8 < ke;
  const uint32_t af[4] = {xa[0], kRows16 ? x_pair(x1, k0, ok1) : 0u, xa[1],
                          kRows16 ? x_pair(x1, k0 + 8, ok1 && h0) : 0u};
  mma_bf16_16816_sched(acc, af, b0, b1);
  if (k0 + 16 < ke) {
    const bool h1 = k0 + 24 < ke;
    const uint32_t af2[4] = {xa[2], kRows16 ? x_pair(x1, k0 + 16, ok1) : 0u, xa[3],
                             kRows16 ? x_pair(x1, k0 + 24, ok1 && h1) : 0u};
    mma_bf16_16816_sched(acc, af2, b2, b3);
  }
}

// Row g's A pairs for chunks k0 + 32 i, i < kN, all requested at once (L1 hits; the mma chain
// would otherwise wait an L1 round trip per chunk). K % 8 == 0: an 8-wide block of k is all in
// or all out.
template <int kN>
__device__ __forceinline__ void stream_x_pairs(uint32_t (&xa)[kN][4], const bf16* x0, bool ok0, int64_t k0,
                                               int64_t ke) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) xa[i][j] = x_pair(x0, k0 + 32 * i + 8 * j, ok0 && k0 + 32 * i + 8 * j < ke);
}

// The warps' partials (part[warp][lane][4]) folded per column group in range order, plus the
// bias, one rounding: element (r, c) of a column group sat in lane (r % 8)·4 + c / 2,
// accumulator (r / 8)·2 + c % 2 of each of its S warps. Call after a __syncthreads.
template <bool kRows16>
__device__ __forceinline__ void stream_fold_store(const GemmKernelArgs& a, const float (*part)[32][4], int S) {
  const int groups = kStreamWarps / S;
  const int rows = int(std::min<int64_t>(kRows16 ? 16 : 8, a.m));
  for (int idx = threadIdx.x; idx < groups * rows * 8; idx += blockDim.x) {
    const int lg = idx / (rows * 8), r = (idx / 8) % rows, c = idx % 8;
    const int64_t col = (int64_t(blockIdx.x) * groups + lg) * 8 + c;
    if (col >= a.n) continue;
    const int ln = (r % 8) * 4 + c / 2, e = (r / 8) * 2 + c % 2;
    float total = 0.f;
    for (int p = 0; p < S; ++p) total += part[lg * S + p][ln][e];
    if (a.bias) total += __bfloat162float(a.bias[col]);
    *out_at(a, r, col) = __float2bfloat16_rn(total);
  }
}

// kRows16: M > 8 (the mma's rows g + 8 hold rows of x too). kChunks 32-k chunks a batch; the next
// batch is requested before this one multiplies. kMinBlocks CTAs per SM (registers capped to
// fit): configuration 7 two, 8 three.
template <bool kRows16, int kChunks, int kMinBlocks>
__global__ void __launch_bounds__(32 * kStreamWarps, kMinBlocks) gemm_stream_kernel(GemmKernelArgs a) {
  __shared__ float part[kStreamWarps][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int S = a.splits, groups = kStreamWarps / S;
  const int lc = warp / S, s = warp % S;
  const int64_t col0 = (int64_t(blockIdx.x) * groups + lc) * 8;
  const bool active = lc < groups && col0 < a.n;  // uniform over the warp
  const int64_t kb = int64_t(s) * a.ks, ke = std::min(a.k, kb + a.ks);
  const int64_t wrow = col0 + g;
  const bool wok = active && wrow < a.n;
  const bf16* wp = a.w + (wok ? wrow : 0) * a.k + 8 * t;

  const uint64_t evict_first = l2_evict_first_policy();  // the weights: read once a step
  uint4 cur[kChunks], nxt[kChunks];
  auto load = [&](auto& buf, int64_t kc) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
      buf[i] = wok && kc + 32 * i + 8 * t < ke ? load_stream16(wp + kc + 32 * i, evict_first)
                                               : make_uint4(0u, 0u, 0u, 0u);
  };
  if (active) load(cur, kb);  // constant data: requested before the wait
  pdl_wait();
  pdl_trigger();

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (active) {
    const bf16* x0 = a.x + int64_t(g) * a.k + 2 * t;
    const bf16* x1 = a.x + int64_t(kRows16 ? g + 8 : g) * a.k + 2 * t;
    const bool ok0 = g < a.m, ok1 = kRows16 && g + 8 < a.m;
    for (int64_t kc = kb; kc < ke; kc += 32 * kChunks) {
      const bool more = kc + 32 * kChunks < ke;
      if (more) load(nxt, kc + 32 * kChunks);
      uint32_t xa[kChunks][4];
      stream_x_pairs<kChunks>(xa, x0, ok0, kc, ke);
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int64_t k0 = kc + 32 * i;
        if (k0 >= ke) break;
        stream_chunk<kRows16>(acc, cur[i], xa[i], x1, ok1, k0, ke, t);
      }
      if (more) {
#pragma unroll
        for (int i = 0; i < kChunks; ++i) cur[i] = nxt[i];
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) part[warp][lane][e] = acc[e];
  __syncthreads();
  stream_fold_store<kRows16>(a, part, S);
}

template <int kChunks, int kMinBlocks>
void launch_variant(const GemmKernelArgs& a, cudaStream_t stream) {
  if (a.m > 16) throw_error("[matmul] the streaming GEMM (configurations 7, 8) takes M <= 16");
  if (a.splits > kStreamWarps) throw_error("[matmul] the streaming GEMM takes at most 8 split ranges");
  const int64_t groups = kStreamWarps / a.splits;
  const unsigned grid = ceil_div(ceil_div(a.n, int64_t(8)), groups);
  if (a.m > 8)
    launch_pdl(gemm_stream_kernel<true, kChunks, kMinBlocks>, dim3(grid), dim3(32 * kStreamWarps), 0, stream, a);
  else
    launch_pdl(gemm_stream_kernel<false, kChunks, kMinBlocks>, dim3(grid), dim3(32 * kStreamWarps), 0, stream, a);
}

}  // namespace

void launch_gemm_stream(const GemmKernelArgs& a, int config, cudaStream_t stream) {
  if (config == 7) launch_variant<4, 2>(a, stream);
  else launch_variant<4, 3>(a, stream);
}

}  // namespace rill::cuda::gemm_detail
