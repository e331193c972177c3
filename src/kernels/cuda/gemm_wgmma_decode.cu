// kernels/cuda/gemm_wgmma_decode.cu — the batch-invariant GEMM's decode kernel on Hopper (sm_90a):
// warpgroup MMA for M ≤ 8 / ≤ 64 rows (configurations 18, 19), split from gemm_wgmma.cu (the
// prefill-shaped kernels) with which it shares the arithmetic and the helpers of gemm_common.cuh
// and wgmma_pipeline.cuh.
//
// The arithmetic of gemm_wgmma.cu's kernels, with x as A and w as B, shaped for a weight stream: a
// work item is kBN output columns and one split range (split schedule) or every range in turn
// (fold schedule, when no workspace or counters are given), and at most a wave of persistent CTAs
// takes the items in turn (+4% alone where the items exceed a wave); a CTA's producer thread keeps
// kStages w tiles (kBN = 64 rows × 64 k, 128-byte swizzle) in flight through the tensor copy
// engine, and one consumer warpgroup issues wgmma m64n64k16 from them (32-row tiles measured
// slower). The x stage holds kXRows rows × 64 k (rows past M zero-filled by the copy engine).
// With kXRows < 64 (8, 16, 32: 1, 2, 4 KB) the A operand's 64 rows run past the stage, so rows
// kXRows-63 read the bytes that follow it in shared memory — whatever they hold, those rows'
// outputs are never stored, and a row of an MMA's output depends on its own row of A only.
// Split schedule: each item writes its range's f32 partial to the workspace, and the last item of
// a column tile to arrive (per-tile counters, reset by it) adds the partials in range order, then
// the bias, then one rounding: the additions of the fold schedule and of gemm.cu's kernels.
// kGlu (variant 2, M ≤ 8): SwiGLU fused as in the prefill kernel's variant 7. w is [gate; up]
// (n = 2·inter rows), y [m, inter]; a work item's w tile is gate's rows [32t, 32t + 32) and up's
// same 32 (two 32-row boxes, one 64-row stage as before), so accumulator columns 0-31 hold g and
// 32-63 u of the same 32 output columns. The fold is per product column exactly as above (partials
// of gate column c and up column c at c and inter + c of the workspace), then
// bf16(bf16(silu(bf16 g)) · bf16 u): the gate/up GEMM's bits, then the SwiGLU kernel's — one launch
// and one latency-bound kernel fewer in a decode step's critical path.
// kGluX (variant 3, M = 1): x is the SwiGLU of a gate/up GEMM's deferred partials (GemmArgs::glu_x,
// the down projection of a batch-1 decode step), computed into the x stages by warps 1-3 of the
// producer warpgroup instead of copied: warp 1 + (i % 3) writes the CTA's i-th k tile — its
// product columns' partials loaded before it waits for the stage (the loads of its next tile in
// flight while it writes this one), added in range order with the bias and rounded as folded()
// does, then bf16(bf16(silu(g)) · u) as the SwiGLU kernel computes it — into row 0 of the stage
// (row 0 of a 128-byte-swizzled tile is stored in order; rows 1-7 feed unstored outputs), then a
// proxy fence and an arrival on the stage's full barrier, which completes on the producer's arrival
// with the weight bytes and this one. The items of column tile 0 also store the product's values
// and x (gate_up, act) as the SwiGLU kernel would have. The SwiGLU kernel's launch, its hand-off
// and x's round trip through L2 leave the step's critical path; x's partials are read by every
// column tile's CTA (~24 KB a CTA for the 8B shape's down projection) instead of once.

#include <algorithm>
#include <atomic>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_pipeline.cuh"

namespace rill::cuda::gemm_detail {

bool g_decode_late_trigger = false;  // set_decode_late_trigger (gemm_common.cuh)
int g_decode_ctas_per_sm = 0;        // set_decode_ctas_per_sm

namespace {

constexpr int kBK = kPipeBK;

int g_decode_prewait = -1;     // set_decode_prewait_stages
int g_decode_min_x_rows = 16;  // set_decode_min_x_rows
int g_decode_x64_stages = 6;   // set_decode_x64_stages
std::atomic<uint64_t> g_decode_glu_x_launches{0};  // decode_glu_x_launches
constexpr int kGluMaxSplits = 4;  // variant 3: the gate/up product's ranges a lane holds in registers

#if defined(RILL_WGMMA_DEVICE)
// Variant 3's x warps (warps 1-3 of the producer warpgroup; see the header): the CTA's k tiles in
// the producer's order — its items blockIdx.x, + gridDim.x, ..., each item's k tiles in turn, the
// i-th in stage i % kStages — warp 1 + (i % 3) writing tile i's 64 values of x (M = 1): lane l
// columns l and l + 32 of the tile.
template <int kBN, int kStages>
__device__ __forceinline__ void glu_x_writer(const GemmKernelArgs& a, int tiles, int splits, int ktiles,
                                             unsigned char* sx, uint64_t* full, uint64_t* empty) {
  constexpr int kXBytes = DecodeTile<kBN, 8>::kXBytes;
  const int xw = int(threadIdx.x / 32) - 1, lane = int(threadIdx.x % 32);
  const int items = tiles * splits;
  const int64_t inter = a.glu_inter;
  const float* ws = a.glu.ws + a.glu.col0;
  const int64_t plane = a.glu.plane;
  const int nsplit = a.glu.splits;
  const bf16* bias = static_cast<const bf16*>(a.glu.bias);
  if (bias) bias += a.glu.col0;
  // A cursor over the CTA's k tiles: item, its k tile t and end (item ≥ items: past the last).
  auto range_of = [&](int item, int& t, int& kt_end) {
    const int range = item / tiles;
    t = splits > 1 ? range * a.tiles_per_split : 0;
    kt_end = splits > 1 ? min(ktiles, t + a.tiles_per_split) : ktiles;
  };
  auto advance = [&](int& item, int& t, int& kt_end, int steps) {
    while (item < items && steps > 0) {
      const int take = min(steps, kt_end - t);
      t += take;
      steps -= take;
      if (t == kt_end) {
        item += int(gridDim.x);
        if (item < items) range_of(item, t, kt_end);
      }
    }
  };
  // Raw partials of the tile's columns l and l + 32: [column][gate, up][range].
  float raw[2][2][kGluMaxSplits];
  auto load = [&](bool valid, int t) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t col = int64_t(t) * kBK + lane + 32 * e;
      const bool ok = valid && col < inter;
#pragma unroll
      for (int r = 0; r < kGluMaxSplits; ++r) {
        raw[e][0][r] = ok && r < nsplit ? __ldcg(ws + r * plane + col) : 0.f;
        raw[e][1][r] = ok && r < nsplit ? __ldcg(ws + r * plane + inter + col) : 0.f;
      }
    }
  };
  pdl_wait();  // the gate/up GEMM's partials are written
  if (!a.late_trigger) pdl_trigger();
  int item = int(blockIdx.x), t = 0, kt_end = 0;
  if (item < items) range_of(item, t, kt_end);
  advance(item, t, kt_end, xw);
  load(item < items, t);
  for (int i = xw; item < items; i += 3) {
    // The fold (range order from 0, then the bias: fold_partials and folded()).
    float g[2], u[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      g[e] = 0.f, u[e] = 0.f;
#pragma unroll
      for (int r = 0; r < kGluMaxSplits; ++r)
        if (r < nsplit) g[e] += raw[e][0][r], u[e] += raw[e][1][r];
    }
    // x, computed before the next tile's loads are issued: few registers live across the
    // division's slow-path call (silu's IEEE division, the SwiGLU kernel's operation).
    // On every lane (no divergent path around the division; see the SwiGLU epilogue below).
    bf16 x[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t col = int64_t(t) * kBK + lane + 32 * e;
      const bool in = col < inter;
      if (bias && in) g[e] += __bfloat162float(bias[col]), u[e] += __bfloat162float(bias[inter + col]);
      const bf16 v = __float2bfloat16_rn(swiglu_of_sums(g[e], u[e]));
      x[e] = in ? v : __float2bfloat16_rn(0.f);  // past K: zeros, as the copy engine fills
    }
    const int cur_t = t;
    const bool store = item % tiles == 0;  // column tile 0's items store the product and x
    advance(item, t, kt_end, 3);
    load(item < items, t);  // the next tile's partials, in flight while this one waits for its stage
    const int s = i % kStages;
    bf16* row = reinterpret_cast<bf16*>(sx + s * kXBytes);
    mbar_wait(&empty[s], (unsigned(i / kStages) & 1u) ^ 1u);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t col = int64_t(cur_t) * kBK + lane + 32 * e;
      row[lane + 32 * e] = x[e];
      if (store && col < inter) {
        a.glu_gate_up[col] = __float2bfloat16_rn(g[e]);
        a.glu_gate_up[inter + col] = __float2bfloat16_rn(u[e]);
        a.glu_act[col] = x[e];
      }
    }
    fence_proxy_async_shared();  // the row, written by this proxy, is read by the wgmma's
    __syncwarp();
    if (lane == 0) mbar_arrive(&full[s]);
  }
}
#endif

template <int kBN, int kXRows, int kStages, bool kGlu = false, bool kGluX = false>
__global__ void __launch_bounds__(256, 3)  // three CTAs an SM (registers capped to fit)
    gemm_wgmma_decode_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                             GemmKernelArgs a, int splits) {
#if defined(RILL_WGMMA_DEVICE)
  using T = DecodeTile<kBN, kXRows>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ unsigned is_last;
  unsigned char* base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* sx = base;                         // kStages × 1 KB, then
  unsigned char* sw = base + kStages * T::kXBytes;  // kStages w tiles (rows 8-63 of an x stage fall here)

  // Work items: (column tile, split range) pairs, item = range · tiles + tile, or one item a tile
  // walking every range (fold schedule, splits == 1 here). Persistent CTAs take items blockIdx.x,
  // + gridDim.x, ...: the producer streams the next item's tiles while the consumers finish one.
  const int tiles = int((a.n + kBN - 1) / kBN), items = tiles * splits;  // (a launch has < 2^31 items)
  const int ktiles = int((a.k + kBK - 1) / kBK);
  const bool split = splits > 1;
  auto item_range = [&](int item, int64_t& n0, int& range, int& kt_begin, int& kt_end) {
    n0 = int64_t(item % tiles) * kBN;
    range = item / tiles;
    kt_begin = split ? range * a.tiles_per_split : 0;
    kt_end = split ? std::min(ktiles, kt_begin + a.tiles_per_split) : ktiles;
  };
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  // A stage's w tile for the item at product column n0: rows [n0, n0 + 64), or with kGlu gate's
  // 32 rows [n0 / 2, n0 / 2 + 32) and up's 32 (output columns n0 / 2 ...).
  const int64_t inter = a.n / 2;
  auto load_w = [&](unsigned char* dst, int k0, int64_t n0, uint64_t* bar, uint64_t policy) {
    if constexpr (kGlu) {
      tma_load_2d_hint(dst, &tw, k0, int(n0 / 2), bar, policy);
      tma_load_2d_hint(dst + T::kWBytes / 2, &tw, k0, int(inter + n0 / 2), bar, policy);
    } else {
      tma_load_2d_hint(dst, &tw, k0, int(n0), bar, policy);
    }
  };

  static_assert(!kGluX || (kXRows == 8 && !kGlu), "x from a pending SwiGLU: configuration 18's 8-row stage");
  // A release per consumer warp; kGluX: a stage is full once the producer's weight tile and the x
  // warp's row have arrived.
  if (threadIdx.x == 0) init_stage_barriers(full, empty, kStages, 4, kGluX ? 2u : 1u);
  __syncthreads();
  constexpr unsigned kStageTx = kGluX ? unsigned(T::kWBytes) : unsigned(T::kXBytes + T::kWBytes);


  if (wg == 0) {
    if (threadIdx.x == 0) {
      const uint64_t evict_first = l2_evict_first_policy();  // for the weight tiles
      int s = 0;
      unsigned phase = 0;
      bool waited = false;
      for (int item = blockIdx.x; item < items; item += gridDim.x) {
        int64_t n0;
        int range, kt_begin, kt_end;
        item_range(item, n0, range, kt_begin, kt_end);
        int t = kt_begin;
        if (!waited) {  // the first item's weights: requested before waiting for the previous kernel
          const int pro = min(min(kt_end - kt_begin, kStages), a.prewait_stages);
          for (int p = 0; p < pro; ++p) {
            mbar_arrive_expect_tx(&full[p], kStageTx);
            load_w(sw + p * T::kWBytes, (kt_begin + p) * kBK, n0, &full[p], evict_first);
          }
          pdl_wait();
          if (!a.late_trigger) pdl_trigger();
          waited = true;
          if constexpr (!kGluX)
            for (int p = 0; p < pro; ++p) tma_load_2d(sx + p * T::kXBytes, &tx, (kt_begin + p) * kBK, 0, &full[p]);
          t += pro;
          s = pro % kStages;
          phase = pro == kStages ? 1u : 0u;
        }
        for (; t < kt_end; ++t) {
          mbar_wait(&empty[s], phase ^ 1u);
          mbar_arrive_expect_tx(&full[s], kStageTx);
          load_w(sw + s * T::kWBytes, t * kBK, n0, &full[s], evict_first);
          if constexpr (!kGluX) tma_load_2d(sx + s * T::kXBytes, &tx, t * kBK, 0, &full[s]);
          if (++s == kStages) s = 0, phase ^= 1u;
        }
      }
      if (!waited) pdl_wait();
      // Late trigger: the CTA has requested its last weight tile; the next kernel may launch once
      // every CTA has (its CTAs then take the SMs this grid leaves, without competing with its
      // weight stream; the backend's default). Early (RILL_DECODE_TRIGGER=early): after the wait.
      pdl_trigger();
    } else if (kGluX && threadIdx.x >= 32) {  // warps 1-3: the x stages
      glu_x_writer<kBN, kStages>(a, tiles, splits, ktiles, sx, full, empty);
    } else if (!a.late_trigger) {
      pdl_trigger();
    }
    return;
  }

  pdl_wait();  // before the first global write
  if (!a.late_trigger) pdl_trigger();
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const uint32_t x_base = smem_addr(sx), w_base = smem_addr(sw);
  float acc[kBN / 8][4], total[kBN / 8][4];
  int s = 0, prev = 0;
  unsigned phase = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    int64_t n0;
    int range, kt_begin, kt_end;
    item_range(item, n0, range, kt_begin, kt_end);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) total[j][0] = total[j][1] = total[j][2] = total[j][3] = 0.f;
    consume_ranges(acc, total, kt_begin, kt_end, a.tiles_per_split, a.k, full, empty, kStages, s, phase, prev, x_base,
                   T::kXBytes, w_base, T::kWBytes, lane,
                   [](float (&d)[kBN / 8][4], uint64_t xd, uint64_t wd) { wgmma::m64n64k16_ss(d, xd, wd); });

    // Accumulator [j][2h + e]: row 16·warp + g + 8h, product column n0 + 8j + 2·tig + e (wgmma.cuh);
    // with kGlu, j < kBN / 16 holds gate's column i0 + 8j + 2·tig + e and j + kBN / 16 up's.
    const int64_t i0 = n0 / 2;  // (kGlu: the item's first output column)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = 16 * warp + g + 8 * h;
      if (row >= a.m) continue;
      if constexpr (kGlu) {
#pragma unroll
        for (int j = 0; j < kBN / 16; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t c = i0 + 8 * j + 2 * tig + e;  // (inter % 32 == 0: c < inter)
            if (split) {
              a.ws[(int64_t(range) * a.m + row) * a.n + c] = total[j][2 * h + e];
              a.ws[(int64_t(range) * a.m + row) * a.n + inter + c] = total[j + kBN / 16][2 * h + e];
            } else {
              float gv = total[j][2 * h + e], uv = total[j + kBN / 16][2 * h + e];
              if (a.bias) gv += __bfloat162float(a.bias[c]), uv += __bfloat162float(a.bias[inter + c]);
              a.ys[0][row * inter + c] = __float2bfloat16_rn(swiglu_of_sums(gv, uv));
            }
          }
      } else {
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t col = n0 + 8 * j + 2 * tig + e;
            if (col >= a.n) continue;
            if (split) {
              a.ws[(int64_t(range) * a.m + row) * a.n + col] = total[j][2 * h + e];
            } else {
              float v = total[j][2 * h + e];
              if (a.bias) v += __bfloat162float(a.bias[col]);
              *out_at(a, row, col) = __float2bfloat16_rn(v);
            }
          }
      }
    }
    // Deferred (GemmArgs::defer): the reader of the product folds the partials; this item is done.
    if (!split || a.defer_fold) continue;
    __threadfence();  // this item's partial is visible device-wide before it is counted
    consumer_sync();
    if (threadIdx.x == 128) {
      unsigned* counter = a.counters + item % tiles;
      is_last = atomicAdd(counter, 1u) == unsigned(splits - 1);
      if (is_last) *counter = 0;  // every range arrived: ready for the next launch
    }
    consumer_sync();
    if (!is_last) continue;  // (read by every consumer thread before the next item's first sync)
    __threadfence();
    if constexpr (kGlu) {
#pragma unroll
      // M ≤ kXRows rows of kBN / 2 columns, two passes of the warpgroup, the SwiGLU computed by every
      // thread and stored by those with an element: silu's expf on a divergent path made ptxas
      // serialize every wgmma of the kernel (C7520).
      for (int it = 0; it < kXRows * (kBN / 2) / 128; ++it) {
        const int idx = int(threadIdx.x) - 128 + 128 * it;
        const bool ok = idx < int(a.m) * (kBN / 2);
        const int64_t row = ok ? idx / (kBN / 2) : 0, c = i0 + idx % (kBN / 2);
        float gv = fold_partials(a.ws + row * a.n + c, a.m * a.n, a.splits);
        float uv = fold_partials(a.ws + row * a.n + inter + c, a.m * a.n, a.splits);
        if (a.bias) gv += __bfloat162float(a.bias[c]), uv += __bfloat162float(a.bias[inter + c]);
        const float o = swiglu_of_sums(gv, uv);
        if (ok) a.ys[0][row * inter + c] = __float2bfloat16_rn(o);
      }
      continue;
    }
    for (int idx = threadIdx.x - 128; idx < int(a.m) * kBN; idx += 128) {
      const int64_t row = idx / kBN, col = n0 + idx % kBN;
      if (col >= a.n) continue;
      float v = fold_partials(a.ws + row * a.n + col, a.m * a.n, a.splits);
      if (a.bias) v += __bfloat162float(a.bias[col]);
      *out_at(a, row, col) = __float2bfloat16_rn(v);
    }
  }
#else
  __trap();  // not built for sm_90a: the host never launches this (gemm_wgmma_available)
#endif
}

// Returns whether the split schedule ran (the partials are in a.ws).
template <int kBN, int kXRows, int kStages, bool kGlu = false, bool kGluX = false>
bool launch_decode_variant(const GemmKernelArgs& a, size_t ws_bytes, int64_t num_counters, int num_sms,
                           cudaStream_t stream) {
  using T = DecodeTile<kBN, kXRows>;
  constexpr auto kernel = gemm_wgmma_decode_kernel<kBN, kXRows, kStages, kGlu, kGluX>;
  constexpr size_t smem = size_t(kStages) * (T::kXBytes + T::kWBytes) + 1024;
  static const bool attr_set = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)attr_set;
  if (a.m > kXRows)
    throw_error(kXRows == 8 ? "[matmul] GEMM configuration 18 (warpgroup decode) takes M <= 8"
                            : "[matmul] GEMM configuration 19 (warpgroup decode) takes M <= 64");
  if (kGluX && (a.m != 1 || !a.glu.ws || a.glu.splits < 1 || a.glu.splits > kGluMaxSplits || a.glu_inter != a.k ||
                !a.glu_gate_up || !a.glu_act))
    throw_error("[matmul] the warpgroup decode GEMM's x from a pending SwiGLU (variant 3) takes M = 1, K = inter and "
                "1-4 ranges of gate/up partials");
  if (kGlu && (a.n % kBN != 0 || a.ny != 1))
    throw_error("[matmul] the warpgroup decode GEMM's SwiGLU takes 2 x inter rows of w with inter % 32 == 0 and one "
                "output");
  // (weight_tile_map: any bf16 [rows, k] in box_rows × 64-k boxes, x's too.)
  const CUtensorMap tx = weight_tile_map(a.x, a.m, a.k, kXRows);
  const CUtensorMap tw = weight_tile_map(a.w, a.n, a.k, kGlu ? kBN / 2 : kBN);
  const int64_t tiles = (a.n + kBN - 1) / kBN;
  // Split schedule when the partials and the per-tile counters fit; else one CTA walks every range.
  const bool split = a.splits > 1 && a.ws && a.counters && tiles <= num_counters &&
                     size_t(a.splits) * size_t(a.m * a.n) * sizeof(float) <= ws_bytes;
  const int64_t items = tiles * (split ? a.splits : 1);
  static const int per_sm = [] {
    int n = 0;
    RILL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 256, smem));
    return std::max(n, 1);
  }();
  const int resident = g_decode_ctas_per_sm > 0 ? std::min(per_sm, g_decode_ctas_per_sm) : per_sm;
  // Persistent beyond one wave.
  const int64_t ctas = std::min<int64_t>(items, int64_t(resident) * std::max(num_sms, 1));
  GemmKernelArgs la = a;
  la.defer_fold = a.defer_fold && split;
  launch_pdl(kernel, dim3(unsigned(ctas)), dim3(256), smem, stream, tx, tw, la, split ? a.splits : 1);
  RILL_CUDA_CHECK_LAUNCH();
  return split;
}

}  // namespace

bool launch_gemm_wgmma_decode(const GemmKernelArgs& k, int variant, size_t ws_bytes, int64_t num_counters,
                              int num_sms, cudaStream_t stream) {
  if (!gemm_wgmma_available())
    throw_error("[matmul] GEMM configurations 18, 19 need an sm_90 GPU and a build for sm_90a "
                "(RILL_CUDA_ARCHITECTURES=90a)");
  GemmKernelArgs a = k;
  a.tiles_per_split = int(a.ks / kBK);
  a.prewait_stages = g_decode_prewait < 0 ? 1 << 30 : g_decode_prewait;
  a.late_trigger = g_decode_late_trigger;
  // 64 columns a tile (32 measured slower: 1.50-2.29 vs 1.91-2.67 TB/s on the 8B shapes at M = 1);
  // M ≤ 8: 8 stages of 9 KB (three CTAs an SM). Configuration 19 takes the smallest x stage holding
  // M (at least set_decode_min_x_rows): 16 rows, 7 stages of 10 KB, or 32 rows, 6 stages of 12 KB
  // (three CTAs an SM, like 18), or 64 rows, 6 stages of 16 KB (two; 4 stages fit three,
  // set_decode_x64_stages) — the same arithmetic: an A row past the stage feeds only an output row
  // past M, which is never stored.
  // Variant 2: 18 with SwiGLU (y [m, n / 2]; launch_gemm checked the shapes). Variant 3: 18 with x
  // computed from a pending SwiGLU (GemmArgs::glu_x).
  // (Variant 2 always folds: its fold is the SwiGLU.)
  if (variant == 0) return launch_decode_variant<64, 8, 8>(a, ws_bytes, num_counters, num_sms, stream);
  if (variant == 3) {  // 18 with x computed from a pending SwiGLU (M = 1); it may defer its fold too
    g_decode_glu_x_launches.fetch_add(1, std::memory_order_relaxed);
    return launch_decode_variant<64, 8, 8, false, true>(a, ws_bytes, num_counters, num_sms, stream);
  }
  a.defer_fold = false;
  if (variant == 2) return launch_decode_variant<64, 8, 8, true>(a, ws_bytes, num_counters, num_sms, stream);
  a.defer_fold = k.defer_fold;
  const int64_t rows = std::max<int64_t>(a.m, g_decode_min_x_rows);
  if (rows <= 16) return launch_decode_variant<64, 16, 7>(a, ws_bytes, num_counters, num_sms, stream);
  if (rows <= 32) return launch_decode_variant<64, 32, 6>(a, ws_bytes, num_counters, num_sms, stream);
  if (g_decode_x64_stages == 4) return launch_decode_variant<64, 64, 4>(a, ws_bytes, num_counters, num_sms, stream);
  return launch_decode_variant<64, 64, 6>(a, ws_bytes, num_counters, num_sms, stream);
}

}  // namespace rill::cuda::gemm_detail

namespace rill::cuda {
void set_decode_prewait_stages(int stages) { gemm_detail::g_decode_prewait = stages; }
void set_decode_late_trigger(bool late) { gemm_detail::g_decode_late_trigger = late; }
void set_decode_ctas_per_sm(int ctas) { gemm_detail::g_decode_ctas_per_sm = ctas; }
void set_decode_min_x_rows(int rows) { gemm_detail::g_decode_min_x_rows = rows; }
void set_decode_x64_stages(int stages) { gemm_detail::g_decode_x64_stages = stages; }
uint64_t decode_glu_x_launches() { return gemm_detail::g_decode_glu_x_launches.load(); }
}  // namespace rill::cuda
