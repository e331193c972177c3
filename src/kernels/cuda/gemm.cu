// kernels/cuda/gemm.cu — batch-invariant bf16 GEMM y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias) on tensor
// cores: mma.sync m16n8k16 (f32 accumulation), ldmatrix fragments, a cp.async multi-stage
// pipeline of x and w tiles in padded shared memory (row stride BK + 8: conflict-free ldmatrix).
//
// Invariance. The arithmetic of y[i, j] depends only on K and on S = gemm_splits(N, K), never on
// M nor on where row i sits in x: K is cut into S ranges of Ks elements (Ks a multiple of 128);
// within a range an accumulator starts at 0 and takes the range's 16-wide k steps in increasing
// order (the rows of an mma are independent, so the tile shape in M and N does not matter, and
// k steps wholly past K are skipped, not multiplied by zeros); the range partials are added in
// range order, total = ((0 + p0) + p1) + ..., then the bias, then one rounding to bf16.
// Two schedules compute exactly that: "split" — CTA z computes range z alone and writes its f32
// partial to a workspace, and gemm_reduce (gemm_fold.cu) adds the partials in order (small M: the
// splits fill the GPU); "fold" — one CTA walks every range and adds each partial into a register total when
// the range ends (large M: no workspace traffic). The tile configuration (by M) and the schedule
// (by M and the workspace size) are free choices that cannot change a bit of the result.
// In the split schedule the last CTA to finish a tile (per-tile arrival counters) folds the
// tile's partials from the workspace in range order, the same additions as the fold schedule; a
// separate reduction kernel runs only when no counters are given.
// Several outputs (fused q/k/v projections): the product's columns are cut into consecutive
// ranges, each written to its own tensor; the arithmetic is that of the one (N_total, K) GEMM.
// A third schedule for decode (M ≤ 16), "stream" (gemm_stream_kernel, configurations 7 and 8):
// no shared-memory tiles, the weight goes from HBM straight into mma fragments, the same mma
// instructions in the same order (see there). Without the sm_90a warpgroup kernels MatmulEngine
// picks it for M ≤ 8 and the tiled configurations for M 9..16; with them the warpgroup decode
// configurations 18 / 19 (gemm_wgmma.cu) come first for M ≤ 64 (measured in the decode graph,
// bench/RESULTS.md).
#include <algorithm>
#include <atomic>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

using namespace gemm_detail;

constexpr int64_t kSplitQuantum = 256;  // Ks is a multiple of every configuration's BK
int g_split_ctas_per_sm = 2;              // set_gemm_split_ctas_per_sm
int g_l2_prefetch_tiles = 0;              // set_gemm_l2_prefetch_tiles
bool g_wgmma = false;                     // set_gemm_wgmma
bool g_wide_tile = false;                 // set_gemm_wide_tile
int g_multicast = -1;                     // set_gemm_multicast (-1: the rule, gemm_multicast_for)
int g_stream = -1;                        // set_gemm_stream (-1: the rule, stream_schedule_for)
bool g_defer_split = true;                // set_decode_defer_split
int g_qkv_rope = -1;                      // set_qkv_rope
std::atomic<uint64_t> g_qkv_rope_launches{0};  // (several devices may launch at once)

// kBulk: the tiles travel by the bulk copy engine (cp.async.bulk, one copy a tile row, completing
// on a per-stage mbarrier) instead of 16-byte cp.async; decode configurations only (M ≤ BM).
template <int BM_, int BN_, int BK_, int WM_, int WN_, int kStages_, bool kBulk_ = false>
struct GemmConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, kStages = kStages_;
  static constexpr bool kBulk = kBulk_;
  static constexpr int kWarpsM = BM / WM, kWarpsN = BN / WN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kStride = BK + 8;
  static constexpr int kChunksK = BK / 8;  // 16-byte chunks per tile row
  static constexpr int MT = WM / 16, NT = WN / 8;
  static constexpr size_t kSmemBytes = size_t(kStages) * (BM + BN) * kStride * sizeof(bf16);
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "tile shape");
  static_assert(kSplitQuantum % BK == 0, "split ranges must be whole tiles");
};

// Decode (M ≤ 16): 64 weight rows × 128 k per stage, 4 warps side by side in N; the weight
// stream keeps 3 stages (48 KiB) in flight per CTA.
using SmallConfig = GemmConfig<16, 64, 128, 16, 16, 4>;
// Decode variants with longer contiguous runs per weight row (512 bytes a tile, kinder to HBM
// pages): 64 rows × 256 k in 3 stages (one CTA per SM), and 32 rows × 256 k of 2 warps in 4
// stages (two CTAs per SM). Same arithmetic; MatmulEngine times them per (N, K) and keeps the
// fastest.
using SmallDeepConfig = GemmConfig<16, 64, 256, 16, 16, 3>;
// Configuration 1's tiles moved by the bulk copy engine (configuration 9) and a deeper variant
// with 6 stages (10): the copies bypass the SM's load/store path (each 16-byte cp.async is an
// instruction tracked by L1). Measured on the H200: 9 as fast as 1 timed alone, slower in the
// decode graph; 10 (one CTA an SM) half as fast. Kept for measurements, never picked
// automatically.
using SmallBulkConfig = GemmConfig<16, 64, 128, 16, 16, 4, true>;
using SmallBulkDeepConfig = GemmConfig<16, 64, 128, 16, 16, 6, true>;
using SmallNarrowConfig = GemmConfig<16, 32, 256, 16, 16, 4>;
// Mid M (≤ 128): 64 × 128 tiles, 8 warps of 32 × 32.
using MidConfig = GemmConfig<64, 128, 64, 32, 32, 4>;
// Prefill: 128 × 128 × 64 tiles, 8 warps of 64 × 32 (the register total of the fold schedule
// doubles the accumulators, which rules out 64 × 64 warp tiles).
using LargeConfig = GemmConfig<128, 128, 64, 64, 32, 4>;
// The same warp tiles in 128 × 64 CTAs of 4 warps (two CTAs per SM).
using LargeNarrowConfig = GemmConfig<128, 64, 64, 64, 32, 4>;

template <class C>
__device__ __forceinline__ void load_x_tile(const GemmKernelArgs& a, bf16* sa, int64_t m0, int64_t k0) {
  for (int i = threadIdx.x; i < C::BM * C::kChunksK; i += C::kThreads) {
    const int r = i / C::kChunksK, c = i % C::kChunksK;
    const int64_t gm = m0 + r, gk = k0 + c * 8;
    const bool ok = gm < a.m && gk < a.k;
    cp_async16(sa + r * C::kStride + c * 8, ok ? a.x + gm * a.k + gk : a.x, ok);
  }
}

template <class C>
__device__ __forceinline__ void load_w_tile(const GemmKernelArgs& a, bf16* sb, int64_t n0, int64_t k0) {
  for (int i = threadIdx.x; i < C::BN * C::kChunksK; i += C::kThreads) {
    const int r = i / C::kChunksK, c = i % C::kChunksK;
    const int64_t gn = n0 + r, gk = k0 + c * 8;
    const bool ok = gn < a.n && gk < a.k;
    cp_async16(sb + r * C::kStride + c * 8, ok ? a.w + gn * a.k + gk : a.w, ok);
  }
}

template <class C>
__device__ __forceinline__ void load_tile(const GemmKernelArgs& a, bf16* sa, bf16* sb, int64_t m0, int64_t n0,
                                          int64_t k0) {
  load_x_tile<C>(a, sa, m0, k0);
  load_w_tile<C>(a, sb, n0, k0);
}

// Decode: one L2 prefetch per weight row of tile `tile` (of the CTA's range), if it exists. The
// shared-memory stages hold 3 tiles in flight; these keep `a.l2_prefetch` more in flight from
// HBM (a GEMV is bound by the bytes in flight), and, issued before the PDL wait, they stream the
// first tiles while the previous (latency-bound) kernel still runs. Changes no data.
template <class C>
__device__ __forceinline__ void l2_prefetch_w_tile(const GemmKernelArgs& a, int64_t n0, int64_t kb, int64_t ke,
                                                   int tile) {
  const int64_t k0 = kb + int64_t(tile) * C::BK;
  if (k0 >= ke) return;
  const unsigned bytes = unsigned(std::min<int64_t>(C::BK, ke - k0) * 2);
  for (int r = threadIdx.x; r < C::BN; r += C::kThreads)
    if (n0 + r < a.n) l2_prefetch(a.w + (n0 + r) * a.k + k0, bytes);
}

// One bulk copy per tile row that exists (rows past M or N keep stale bytes: an mma row or
// column depends on its own row of x or w only, and those outputs are never written). Rows end at
// K; in a tile holding K's end with a half 16-wide step (K % 16 == 8), that step's upper half is
// zeroed by ordinary stores (no copy writes those bytes, and the stage is not reused after it).
template <class C>
__device__ __forceinline__ void bulk_x_tile(const GemmKernelArgs& a, bf16* sa, int64_t m0, int64_t k0, uint64_t* bar,
                                            bool arrive) {
  const int64_t kv = std::min<int64_t>(C::BK, a.k - k0);
  const int rows = int(std::min<int64_t>(C::BM, a.m - m0));
  if (threadIdx.x == 0) {
    if (arrive) mbar_arrive_expect_tx(bar, unsigned(rows * kv * 2));
    else mbar_expect_tx(bar, unsigned(rows * kv * 2));
  }
  for (int r = threadIdx.x; r < rows; r += C::kThreads)
    bulk_copy(sa + r * C::kStride, a.x + (m0 + r) * a.k + k0, unsigned(kv * 2), bar);
  if (kv % 16 != 0)
    for (int r = threadIdx.x; r < C::BM; r += C::kThreads)
      *reinterpret_cast<uint4*>(sa + r * C::kStride + kv) = make_uint4(0u, 0u, 0u, 0u);
}

template <class C>
__device__ __forceinline__ void bulk_w_tile(const GemmKernelArgs& a, bf16* sb, int64_t n0, int64_t k0, uint64_t* bar) {
  static_assert(C::kChunksK * 8 == C::BK, "one copy a row covers the tile's 16-byte chunks");
  const int64_t kv = std::min<int64_t>(C::BK, a.k - k0);
  const int rows = int(std::min<int64_t>(C::BN, a.n - n0));
  if (threadIdx.x == 0) mbar_expect_tx(bar, unsigned(rows * kv * 2));
  for (int r = threadIdx.x; r < rows; r += C::kThreads)
    bulk_copy(sb + r * C::kStride, a.w + (n0 + r) * a.k + k0, unsigned(kv * 2), bar);
  if (kv % 16 != 0)
    for (int r = threadIdx.x; r < C::BN; r += C::kThreads)
      *reinterpret_cast<uint4*>(sb + r * C::kStride + kv) = make_uint4(0u, 0u, 0u, 0u);
}

template <class C>
__global__ void __launch_bounds__(C::kThreads) gemm_kernel(GemmKernelArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ uint64_t full[C::kBulk ? C::kStages : 1];  // bulk: the stage's copies have landed
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
  if constexpr (C::kBulk) __trap();  // no bulk copy engine below sm_90 (the host never picks these)
#endif
  bf16* sa = reinterpret_cast<bf16*>(smem_raw);
  bf16* sb = sa + C::kStages * C::BM * C::kStride;
  constexpr int MT = C::MT, NT = C::NT;

  const int64_t n0 = int64_t(blockIdx.x) * C::BN, m0 = int64_t(blockIdx.y) * C::BM;
  const int s_first = a.split_schedule ? int(blockIdx.z) : 0;
  const int s_last = a.split_schedule ? int(blockIdx.z) : a.splits - 1;
  const int64_t kb = int64_t(s_first) * a.ks;
  const int64_t ke = std::min(a.k, int64_t(s_last + 1) * a.ks);
  const int tiles = int((ke - kb + C::BK - 1) / C::BK);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / C::kWarpsN, warp_n = warp % C::kWarpsN;
  const int g = lane / 4, tig = lane % 4;

  // The prologue's weight tiles are requested before waiting for the previous kernel (launch.h):
  // the weights are constant. Group 0 holds them all with x's first tile, group st x's tile st,
  // so waiting for group st still covers weight tile st. (Bulk: a stage's weight bytes are
  // expected before its one arrival, which comes with its x tile.)
  if constexpr (C::kBulk) {
    if (threadIdx.x == 0) {
      for (int st = 0; st < C::kStages; ++st) mbar_init(&full[st], 1);
      mbar_init_fence();
    }
    __syncthreads();
  }
#pragma unroll
  for (int st = 0; st < C::kStages - 1; ++st)
    if (st < tiles) {
      if constexpr (C::kBulk) bulk_w_tile<C>(a, sb + st * C::BN * C::kStride, n0, kb + int64_t(st) * C::BK, &full[st]);
      else load_w_tile<C>(a, sb + st * C::BN * C::kStride, n0, kb + int64_t(st) * C::BK);
    }
  if constexpr (C::BM <= 16)
    for (int p = 0; p < a.l2_prefetch; ++p) l2_prefetch_w_tile<C>(a, n0, kb, ke, C::kStages - 1 + p);
  pdl_wait();
  pdl_trigger();
#pragma unroll
  for (int st = 0; st < C::kStages - 1; ++st) {
    if (st < tiles) {
      if constexpr (C::kBulk)
        bulk_x_tile<C>(a, sa + st * C::BM * C::kStride, m0, kb + int64_t(st) * C::BK, &full[st], true);
      else load_x_tile<C>(a, sa + st * C::BM * C::kStride, m0, kb + int64_t(st) * C::BK);
    }
    if constexpr (!C::kBulk) cp_async_commit();
  }

  float acc[MT][NT][4], total[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = total[i][j][e] = 0.f;

  for (int t = 0; t < tiles; ++t) {
    if constexpr (!C::kBulk) cp_async_wait<C::kStages - 2>();
    __syncthreads();  // tile t landed for every thread; every warp is done with tile t - 1
    {
      const int nt = t + C::kStages - 1;
      if constexpr (C::BM <= 16)
        if (a.l2_prefetch > 0) l2_prefetch_w_tile<C>(a, n0, kb, ke, nt + a.l2_prefetch);
      const int st = nt % C::kStages;
      if constexpr (C::kBulk) {
        if (nt < tiles) {
          bulk_w_tile<C>(a, sb + st * C::BN * C::kStride, n0, kb + int64_t(nt) * C::BK, &full[st]);
          bulk_x_tile<C>(a, sa + st * C::BM * C::kStride, m0, kb + int64_t(nt) * C::BK, &full[st], true);
        }
        // Tile t's copies have landed (the tail's zeroed half step was stored before an earlier
        // __syncthreads: it is issued at least one iteration ahead, or in the prologue).
        mbar_wait(&full[t % C::kStages], unsigned(t / C::kStages) & 1u);
      } else {
        if (nt < tiles)
          load_tile<C>(a, sa + st * C::BM * C::kStride, sb + st * C::BN * C::kStride, m0, n0,
                       kb + int64_t(nt) * C::BK);
        cp_async_commit();
      }
    }
    const int64_t k0 = kb + int64_t(t) * C::BK;
    const bf16* as = sa + (t % C::kStages) * C::BM * C::kStride + (warp_m * C::WM + (lane % 16)) * C::kStride +
                     (lane / 16) * 8;
    const bf16* bs = sb + (t % C::kStages) * C::BN * C::kStride +
                     (warp_n * C::WN + (lane % 8) + (lane / 16) * 8) * C::kStride + ((lane / 8) % 2) * 8;
    uint32_t af[2][MT][4], bfr[2][NT / 2][4];
    auto load_frags = [&](int buf, int kk) {
#pragma unroll
      for (int i = 0; i < MT; ++i) ldmatrix_x4(af[buf][i], as + i * 16 * C::kStride + kk * 16);
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) ldmatrix_x4(bfr[buf][j], bs + j * 16 * C::kStride + kk * 16);
    };
    auto mma_step = [&](int buf) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          mma_bf16_16816(acc[i][j], af[buf][i], bfr[buf][j / 2][(j % 2) * 2], bfr[buf][j / 2][(j % 2) * 2 + 1]);
    };
    if (a.k - k0 >= C::BK) {
      // A whole tile: fragments of step kk + 1 load while step kk multiplies.
      load_frags(0, 0);
#pragma unroll
      for (int kk = 0; kk < C::BK / 16; ++kk) {
        if (kk + 1 < C::BK / 16) load_frags((kk + 1) & 1, kk + 1);
        mma_step(kk & 1);
      }
    } else {
      // The tile holding K's end: k steps wholly past K are skipped.
      const int steps = int((a.k - k0 + 15) / 16);
      for (int kk = 0; kk < steps; ++kk) {
        load_frags(0, kk);
        mma_step(0);
      }
    }
    if (!a.split_schedule && ((t + 1) % a.tiles_per_split == 0 || t + 1 == tiles)) {
      // A split range ended: add its partial into the total in range order.
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            total[i][j][e] += acc[i][j][e];
            acc[i][j][e] = 0.f;
          }
    }
  }
  if constexpr (!C::kBulk) cp_async_wait<0>();

  const bool pairs = a.pairs;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + warp_m * C::WM + i * 16 + g + h * 8;
        const int64_t col = n0 + warp_n * C::WN + j * 8 + tig * 2;
        if (row >= a.m || col >= a.n) continue;
        if (a.split_schedule) {
          float* dst = a.ws + (int64_t(blockIdx.z) * a.m + row) * a.n + col;
          if (pairs) {
            *reinterpret_cast<float2*>(dst) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
          } else {
            dst[0] = acc[i][j][2 * h];
            if (col + 1 < a.n) dst[1] = acc[i][j][2 * h + 1];
          }
        } else {
          float v0 = total[i][j][2 * h], v1 = total[i][j][2 * h + 1];
          if (a.bias) {
            v0 += __bfloat162float(a.bias[col]);
            if (col + 1 < a.n) v1 += __bfloat162float(a.bias[col + 1]);
          }
          bf16* dst = a.ny == 1 ? a.ys[0] + row * a.n + col : out_at(a, row, col);
          if (pairs) {
            *reinterpret_cast<uint32_t*>(dst) = float2_to_bf16x2(v0, v1);
          } else {
            dst[0] = __float2bfloat16_rn(v0);
            if (col + 1 < a.n) *out_at(a, row, col + 1) = __float2bfloat16_rn(v1);
          }
        }
      }
  if constexpr (C::BM <= 16) {  // decode configurations only: the prefill code stays lean
  if (!a.split_schedule || !a.counters) return;

  // Split schedule: the last CTA of this tile to arrive folds every range's partial in order.
  __shared__ unsigned is_last;
  __threadfence();  // this CTA's partial is visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = a.counters + (int64_t(blockIdx.y) * gridDim.x + blockIdx.x);
    is_last = atomicAdd(counter, 1u) == gridDim.z - 1;
    if (is_last) *counter = 0;  // all arrivals counted: ready for the next launch
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int rows = int(min(int64_t(C::BM), a.m - m0));
  for (int idx = threadIdx.x; idx < rows * C::BN; idx += C::kThreads) {
    const int64_t row = m0 + idx / C::BN, col = n0 + idx % C::BN;
    if (col >= a.n) continue;
    float total = 0.f;
    for (int p = 0; p < a.splits; ++p) total += __ldcg(a.ws + (int64_t(p) * a.m + row) * a.n + col);
    if (a.bias) total += __bfloat162float(a.bias[col]);
    *out_at(a, row, col) = __float2bfloat16_rn(total);
  }
  }
}

template <class C>
void launch_config(const GemmKernelArgs& k, int num_sms, size_t ws_bytes, int64_t num_counters, cudaStream_t stream) {
  static const bool attr_set = [] {
    RILL_CUDA_CHECK(
        cudaFuncSetAttribute(gemm_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes)));
    return true;
  }();
  (void)attr_set;
  GemmKernelArgs a = k;
  a.tiles_per_split = int(a.ks / C::BK);
  a.l2_prefetch = g_l2_prefetch_tiles;
  const int64_t n_tiles = ceil_div(a.n, int64_t(C::BN)), m_tiles = ceil_div(a.m, int64_t(C::BM));
  // Split when the partials fit the workspace and either the output tiles alone leave SMs idle
  // or M is decode-sized (the ranges are chosen to fill the GPU for that case, gemm_split).
  const bool in_kernel_fold = C::BM <= 16 && a.counters && n_tiles * m_tiles <= num_counters;
  if (!in_kernel_fold) a.counters = nullptr;
  a.split_schedule = a.splits > 1 && a.ws && size_t(a.splits) * size_t(a.m * a.n) * sizeof(float) <= ws_bytes &&
                     (n_tiles * m_tiles < 2 * int64_t(num_sms) || (in_kernel_fold && C::BM <= 16));
  dim3 grid(unsigned(n_tiles), unsigned(m_tiles), a.split_schedule ? unsigned(a.splits) : 1u);
  launch_pdl(gemm_kernel<C>, dim3(grid), dim3(C::kThreads), C::kSmemBytes, stream, a);
  RILL_CUDA_CHECK_LAUNCH();
  if (a.split_schedule && !a.counters) {
    gemm_detail::launch_gemm_reduce(a, stream);
  }
}

}  // namespace

void set_gemm_split_ctas_per_sm(int ctas) { g_split_ctas_per_sm = std::max(1, ctas); }
void set_gemm_l2_prefetch_tiles(int tiles) { g_l2_prefetch_tiles = std::max(0, tiles); }
bool gemm_wgmma_supported() { return gemm_detail::gemm_wgmma_available(); }
void set_gemm_wgmma(bool on) { g_wgmma = on && gemm_detail::gemm_wgmma_available(); }
bool gemm_wgmma_enabled() { return g_wgmma; }
void set_decode_defer_split(bool on) { g_defer_split = on; }
void set_qkv_rope(int mode) { g_qkv_rope = mode; }
int qkv_rope_mode() { return g_qkv_rope; }
uint64_t qkv_rope_launches() { return g_qkv_rope_launches.load(); }
bool decode_defer_split() { return g_defer_split; }
void set_gemm_wide_tile(bool on) { g_wide_tile = on; }

GemmSplit gemm_split(int64_t n, int64_t k, int num_sms) {
  // Decode (M ≤ 16) streams the weights once: its CTAs (the streaming kernel's 8 warps, each
  // 8 output columns × one range; two resident per SM) should fill whole waves. Take the fewest
  // ranges (1, 2, 4 or 8, each a multiple of 256 k; a power of two so that the ranges of a column
  // group fill a CTA's warps) whose CTAs fill at least 90% of a wave and 90% of their last wave;
  // failing that, the best fill. E.g. on 132 SMs: 4096×4096 → 4 ranges (256 CTAs, one wave),
  // 6144×4096 → 8 (768, three waves), 24576×4096 → 2, 151936×4096 → 1 (2374, nine waves).
  const int64_t col_groups = std::max<int64_t>(1, (n + 7) / 8);
  const int64_t slots = g_split_ctas_per_sm * int64_t(std::max(num_sms, 1));
  GemmSplit best, fallback;
  double best_fill = -1.0;
  for (int64_t s = 1; s <= 8; s *= 2) {
    GemmSplit r;
    r.ks = std::max<int64_t>(kSplitQuantum, (ceil_div(k, s) + kSplitQuantum - 1) / kSplitQuantum * kSplitQuantum);
    r.splits = int(std::max<int64_t>(1, ceil_div(k, r.ks)));
    const int64_t ctas = ceil_div(col_groups, 8 / r.splits);
    const double fill = double(ctas) / double(ceil_div(ctas, slots) * slots);
    if (ctas * 10 >= slots * 9 && fill >= 0.9) return r;
    if (fill > best_fill + 1e-9) best_fill = fill, fallback = r;
  }
  best = fallback;
  if (best.ks == 0) best.ks = std::max<int64_t>(kSplitQuantum, k), best.splits = 1;
  return best;
}

namespace {
// A split launch's partials (workspace [splits, m, n]) handed to the op that reads its product.
void set_partials(GemmPartials& p, const GemmKernelArgs& k) {
  p.ws = k.ws;
  p.bias = k.bias;
  p.m = k.m;
  p.n = k.n;
  p.splits = k.splits;
  p.num_outs = k.ny;
  for (int s = 0; s < k.ny; ++s) p.outs[s] = k.ys[s], p.out_end[s] = k.y_end[s];
}

// The rule for the persistent warpgroup kernel (configuration 12): its 128 × 128 output tiles fill
// at least half the SMs.
bool persistent_tiles_fill(int64_t m, int64_t n, int num_sms) {
  return 2 * ceil_div(m, int64_t(128)) * ceil_div(n, int64_t(128)) >= num_sms;
}
}  // namespace

void set_gemm_multicast(int mode) { g_multicast = mode; }
int gemm_multicast() { return g_multicast; }

// The persistent warpgroup kernels in multicast pairs (variants 8, 9) from 1,024 rows: there the 128 ×
// 128 tiles' operand reads make L2 the busiest unit, and sharing each w tile between two row tiles
// pays (H100, RILL_GEMM_MULTICAST=1 against 0 at 4,096 rows: 4096³ 235 against 245 µs, gate/up +
// SwiGLU 1,323 against 1,553 µs, prefill of 4,096 tokens +10%); at 512 rows the pairs lose (4096 ×
// 4096 42 against 40 µs, gate/up 185 against 178: the L2 is not the limit there and the pair walks
// at its slower CTA's pace). bench/RESULTS.md run AU. Same bits either way.
bool gemm_multicast_for(int64_t m) { return g_multicast == 1 || (g_multicast < 0 && m >= 1024); }

void set_gemm_stream(int mode) { g_stream = mode; }
int gemm_stream() { return g_stream; }

namespace {
// The warpgroup GEMM's stream schedule (variants 10, 11: every CTA the same share of the tiles' split
// ranges, a tile split between two CTAs carried over as a published total; gemm_wgmma.cu) for GEMMs of
// one row tile (65-128 rows: decode batches, short prompts) whose tiles would leave SMs idle — the
// persistent walk's last round under 90% full (gate/up's 192 tiles at 128 rows on 132 SMs: 73%) or
// fewer tiles than SMs (q/k/v's 48: one CTA a range, f32 partials and their fold) — provided each CTA
// gets two ranges or more (with fewer, a tile's total goes from CTA to CTA in a chain). Measured on an
// H100 at 128 rows (bench/RESULTS.md run AY): q/k/v 47.1 → 42.9 µs, gate/up 97.0 → 90.2, decode batch
// 128 +2.75%; o and down (32 tiles × 4 ranges) stay faster split (28.7 / 56.0 µs against 32.8 / 60.3).
// Not with two row tiles or more: a CTA then walks one column's row tiles one after the other, where the
// persistent walk has the CTAs of both rows read each weight tile together — at 256 rows gate/up took
// 161 against 110 µs (the weights read twice from HBM) and q/k/v gained nothing. Not with multicast pairs
// either (from 1,024 rows). It needs the workspace for the published totals and the flags at the
// counters' end. RILL_GEMM_STREAM=0 / 1: never / wherever it can run. Same bits either way.
// Whether a's workspace holds the published totals and its counters the flags (past the decode ones).
bool stream_resources_fit(const GemmArgs& a) {
  const int sms = std::max(a.num_sms, 1);
  return a.workspace && a.workspace_bytes >= gemm_detail::stream_workspace_bytes(sms) && a.counters &&
         a.num_counters >= 2 * int64_t(gemm_detail::stream_flags(sms));
}

bool stream_schedule_for(const GemmArgs& a, int splits) {
  if (g_stream == 0 || !g_wgmma || splits < 2 || gemm_multicast_for(a.m) || !stream_resources_fit(a)) return false;
  const int sms = std::max(a.num_sms, 1);
  if (g_stream == 1) return true;
  if (a.m > 128) return false;
  const int64_t tiles = ceil_div(a.n, int64_t(128));
  const double fill = double(tiles) / double(ceil_div(tiles, int64_t(sms)) * sms);
  return fill < 0.9 && tiles * splits >= 2 * int64_t(sms);
}

// The stream schedule's flags: the last stream_flags of the counters (the decode split schedule's
// per-tile counters start at 0 and stay below them: a launch has at most 151936 / 64 column tiles).
unsigned* stream_flags_of(const GemmArgs& a) {
  return a.counters + (a.num_counters - gemm_detail::stream_flags(std::max(a.num_sms, 1)));
}
}  // namespace

bool gemm_swiglu_fits(int64_t m, int64_t inter, int64_t k, int num_sms) {
  return g_wgmma && inter > 0 && inter % 64 == 0 && k % 8 == 0 &&
         persistent_tiles_fill(m, 2 * inter, std::max(num_sms, 1));
}

bool decode_glu_fold_fits(int64_t m, int64_t inter, int64_t k, int num_sms) {
  if (!g_wgmma || m < 1 || m > 64 || inter <= 0 || inter % 32 != 0 || k % 8 != 0) return false;
  const int64_t tiles = 2 * inter / 64, slots = gemm_detail::decode_glu_slots(m, num_sms);
  return tiles <= slots && tiles * 10 >= slots * 9;
}

void launch_gemm(const GemmArgs& a, cudaStream_t stream) {
  if (a.defer) *a.defer = GemmPartials{};  // set below where a decode launch leaves its partials
  if (a.m == 0 || a.n == 0) return;
  if (a.k <= 0) throw_error("[matmul] the batch-invariant GEMM needs K > 0");
  auto aligned = [](const void* p, uintptr_t b) { return reinterpret_cast<uintptr_t>(p) % b == 0; };
  // The split ranges are those of the unfused gate/up GEMM (N = 2 · inter): the same additions.
  GemmSplit sp = gemm_split(a.n, a.k, a.num_sms);
  GemmKernelArgs k{};
  k.x = static_cast<const bf16*>(a.x);
  k.w = static_cast<const bf16*>(a.w);
  k.w_panels = a.w_panels;
  k.bias = static_cast<const bf16*>(a.bias);
  if (a.num_outs <= 0) {
    k.ys[0] = static_cast<bf16*>(a.y);
    k.y_end[0] = a.n;
    k.ny = 1;
    k.pairs = a.n % 2 == 0 && aligned(a.y, 4);
  } else {
    if (a.num_outs > GemmArgs::kMaxOuts) throw_error("[matmul] at most 6 GEMM outputs");
    int64_t begin = 0;
    for (int s = 0; s < a.num_outs; ++s) {
      if (a.out_end[s] <= begin || (a.out_end[s] - begin) % 8 != 0 || !aligned(a.outs[s], 16))
        throw_error("[matmul] GEMM output ranges must be increasing multiples of 8 columns, 16-byte aligned");
      k.ys[s] = static_cast<bf16*>(a.outs[s]);
      k.y_end[s] = a.out_end[s];
      begin = a.out_end[s];
    }
    if (begin != a.n) throw_error("[matmul] the GEMM output ranges must cover the n columns");
    k.ny = a.num_outs;
    k.pairs = true;
  }
  k.ws = a.workspace;
  k.counters = a.counters;
  k.m = a.m;
  k.n = a.n;
  k.k = a.k;
  k.ks = sp.ks;
  k.splits = sp.splits;
  k.prewait_stages = a.prewait_stages;
  // k-panels (GemmArgs::w_panels) are read by the warpgroup kernels alone: the decode configurations
  // 18 and 19 (M ≤ 64) and 11-17 (larger M, SwiGLU). Where neither takes the GEMM, the caller has
  // given panels to a path that cannot read them: an error, never a wrong product.
  if (a.w_panels) {
    const bool decode = a.config == 18 || a.config == 19;
    if (!g_wgmma || !panels_fit(a.n, a.k) || !aligned(a.x, 16) || !aligned(a.w, 16) ||
        (a.config > 0 && !decode && (a.config < 11 || a.config > 17) && a.config != 20))
      throw_error(("[matmul] a weight stored as k-panels needs the warpgroup GEMM (sm_90a), N and K multiples of "
                   "64, 16-byte aligned x and w and configuration 11-20 (got N " + std::to_string(a.n) + ", K " +
                   std::to_string(a.k) + ", configuration " + std::to_string(a.config) + ")")
                      .c_str());
  }
  if (a.glu_inter > 0 && (a.config == 18 || a.config == 19)) {  // decode rows: the decode kernel's SwiGLU (variant 2)
    if (!g_wgmma || a.m > (a.config == 18 ? 8 : 64) || a.n != 2 * a.glu_inter || a.glu_inter % 32 != 0 ||
        a.num_outs > 0 || a.k % 8 != 0 || !aligned(a.x, 16) || !aligned(a.w, 16) || a.glu_schedule < 0 ||
        a.glu_schedule > 2)
      throw_error("[matmul] the decode SwiGLU GEMM (configurations 18, 19) needs the warpgroup GEMM (sm_90a), M <= 8 "
                  "(18) or 64 (19), N = 2 x inter with inter % 32 == 0, K % 8 == 0, 16-byte aligned x and w and "
                  "schedule 0, 1 or 2");
    if (a.glu_schedule >= 1) {  // the fold schedule: no workspace, no counters
      k.ws = nullptr;
      k.counters = nullptr;
      k.exit_trigger = a.glu_schedule == 2;
    }
    gemm_detail::launch_gemm_wgmma_decode(k, 2, a.workspace_bytes, a.num_counters, a.num_sms, stream);
    return;
  }
  if (a.glu_inter > 0) {  // SwiGLU in the warpgroup kernel's epilogue (variant 7)
    if (!g_wgmma || a.n != 2 * a.glu_inter || a.glu_inter % 64 != 0 || a.num_outs > 0 || a.k % 8 != 0 ||
        !aligned(a.x, 16) || !aligned(a.w, 16) || !aligned(a.y, 4))
      throw_error("[matmul] the SwiGLU GEMM needs the warpgroup GEMM (sm_90a), N = 2 x inter with inter % 64 == 0, "
                  "K % 8 == 0, 16-byte aligned x and w and one 4-byte aligned output (see gemm_swiglu_fits)");
    const bool stream_glu = stream_schedule_for(a, sp.splits);
    if (stream_glu) k.counters = stream_flags_of(a);
    gemm_detail::launch_gemm_wgmma(k, gemm_multicast_for(a.m) ? 9 : stream_glu ? 11 : 7, a.num_sms, a.workspace_bytes,
                                   stream);
    return;
  }
  if (a.k % 8 != 0 || !aligned(a.x, 16) || !aligned(a.w, 16)) {
    gemm_detail::launch_gemm_fallback(k, stream);
    return;
  }
  // M > 16 (same bits, any configuration): the warpgroup kernel (sm_90a) with persistent CTAs once
  // its 128 × 128 tiles fill half the SMs (446-581 TFLOP/s at M = 512 and 4096 on the 8B shapes);
  // with fewer tiles (decode batches of 17-256 rows) one split range a CTA and the reduction
  // kernel, when the partials fit the workspace; otherwise, and without sm_90a code, the 64×128
  // mma.sync tiles (2 CTAs per SM, split ranges across CTAs at small M; 158-176 TFLOP/s). (MatmulEngine
  // sets a decode configuration for M ≤ 64 first: 18 / 19 on sm_90a.)
  const bool wgmma_split = g_wgmma && sp.splits > 1 && a.workspace &&
                           size_t(sp.splits) * size_t(a.m * a.n) * sizeof(float) <= a.workspace_bytes;
  // (k-panels: the warpgroup kernel at any M; where its tiles do not fill, 15 — split ranges, or one CTA a tile.)
  const bool persistent = g_wgmma && persistent_tiles_fill(a.m, a.n, a.num_sms);
  const int persistent_config = g_wide_tile && a.n % 192 == 0 ? 16 : 12;
  // (MatmulEngine gives M ≤ 64 the decode configurations 18 / 19 before this.)
  const bool stream_config = a.m > 16 && stream_schedule_for(a, sp.splits);
  const int config = a.config > 0     ? a.config
                     : stream_config  ? 20
                     : a.w_panels     ? (persistent ? persistent_config : 15)
                     : a.m <= 16      ? 1
                     : persistent     ? persistent_config
                     : wgmma_split    ? 15
                                      : 2;
  switch (config) {
    case 1: launch_config<SmallConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 2: launch_config<MidConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 3: launch_config<LargeConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 4: launch_config<LargeNarrowConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 5: launch_config<SmallDeepConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 6: launch_config<SmallNarrowConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 7: case 8: launch_gemm_stream(k, config, stream); return;
    case 9: launch_config<SmallBulkConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 10: launch_config<SmallBulkDeepConfig>(k, a.num_sms, a.workspace_bytes, a.num_counters, stream); return;
    case 18: case 19: {
      if (config == 18 && a.rope && a.rope_ran &&
          gemm_detail::launch_gemm_wgmma_decode_rope(k, *a.rope, a.num_sms, stream)) {
        *a.rope_ran = true;  // q, k, v and the cache rows written; nothing deferred
        g_qkv_rope_launches.fetch_add(1);
        return;
      }
      k.defer_fold = a.defer != nullptr && a.workspace != nullptr;
      const bool split =
          gemm_detail::launch_gemm_wgmma_decode(k, config - 18, a.workspace_bytes, a.num_counters, a.num_sms, stream);
      if (k.defer_fold && split) set_partials(*a.defer, k);  // the partials wait for the op reading the product
      return;
    }
    case 11: case 12: case 13: case 14: case 16: case 17:  // (12 from 1,024 rows: in multicast pairs)
      gemm_detail::launch_gemm_wgmma(k, config == 12 && gemm_multicast_for(a.m) ? 8 : config - 11, a.num_sms,
                                     a.workspace_bytes, stream);
      return;
    case 15: {  // split ranges over CTAs, then the reduction kernel folds them in order
      // One range, or partials that do not fit the workspace: one CTA a tile walks every range.
      if (sp.splits == 1 || !wgmma_split) {
        gemm_detail::launch_gemm_wgmma(k, 0, a.num_sms, a.workspace_bytes, stream);
        return;
      }
      gemm_detail::launch_gemm_wgmma(k, 4, a.num_sms, a.workspace_bytes, stream);
      // Deferred (set_decode_defer_split; a captured decode step of 65-256 rows: o and down, q/k/v
      // at ≤ 128): the op that reads the product folds the ranges on load, as after configurations
      // 18 and 19 — the reduction kernel's additions (from 0, in range order, then the bias),
      // without its launch and its output's round trip.
      if (a.defer && g_defer_split) {
        set_partials(*a.defer, k);
        return;
      }
      gemm_detail::launch_gemm_reduce(k, stream);
      return;
    }
    case 20: {  // the warpgroup kernel's stream schedule (stream_schedule_for)
      if (!g_wgmma || sp.splits < 2 || !stream_resources_fit(a))
        throw_error("[matmul] GEMM configuration 20 (the stream schedule) needs the warpgroup GEMM (sm_90a), 2+ split "
                    "ranges, the split workspace and the GEMM counters");
      k.counters = stream_flags_of(a);
      gemm_detail::launch_gemm_wgmma(k, 10, a.num_sms, a.workspace_bytes, stream);
      return;
    }
    default: throw_error("[matmul] GEMM tile configuration must be 1..20");
  }
}

}  // namespace rill::cuda
