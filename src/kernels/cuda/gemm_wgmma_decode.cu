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

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/rope_common.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_pipeline.cuh"

namespace rill::cuda::gemm_detail {

bool g_decode_late_trigger = false;  // set_decode_late_trigger (gemm_common.cuh)
int g_decode_ctas_per_sm = 0;        // set_decode_ctas_per_sm

namespace {

constexpr int kBK = kPipeBK;

int g_decode_prewait = -1;     // set_decode_prewait_stages
int g_decode_prewait_fill = 0;  // set_decode_prewait_fill
int g_decode_prewait_after_attention = -1;  // set_decode_prewait_after_attention
int g_decode_min_x_rows = 16;  // set_decode_min_x_rows
int g_decode_l2_promotion = 0;  // set_decode_l2_promotion: bytes (none unless set)
int g_decode_few_item_stages = 9;  // set_decode_few_item_stages

// The RoPE op in the epilogue (kRope, launch_gemm_wgmma_decode_rope): M ≤ kRopeRows rows, head_dim
// 128 (two column tiles a head), 2, 4 or 8 split ranges, a cluster of kRopeCluster CTAs a head, each a
// tile's S / 2 ranges, two CTAs an SM. (Clusters of 8 three-an-SM CTAs, one a tile's two ranges, did
// not fit 48 in a wave on the H200's GPCs: the 8B shape's 32 + 8 + 8 heads.) Rank 0 owns the head:
// the others push their range partials into its shared memory and leave.
constexpr int kRopeRows = 2, kRopeCluster = 4, kRopeMaxSplits = 8;
constexpr int kRopeRangeFloats = kRopeRows * 16 * 8;  // a range's partials: [row][chunk of 16][8]
struct NoRope {};
template <bool kRope>
using DecodeRope = std::conditional_t<kRope, RopeArgs, NoRope>;

#if defined(RILL_WGMMA_DEVICE)
// The RoPE op of one head in the q/k/v GEMM's epilogue, run by warp 0 of the cluster's rank 0: lane
// 16·row + c holds chunk c (columns 8c .. 8c + 7) of its row, as in rope_heads_kernel (rope.cu), and
// runs that kernel's operations on the values it would have read — the chunk's partials folded as
// partials.cuh's folded8 does (from 0, in range order, then the bias, one rounding), then
// norm_rotate_chunk (Qwen3's q/k norms where set, the rotation) for q and k heads — and stores them
// where it does (q; k and v, and their cache rows at the row's slot).
__device__ __forceinline__ void rope_epilogue(const RopeArgs& r, const GemmKernelArgs& a, int splits,
                                              const float* parts, uint64_t* bar, int lane) {
  using namespace rope_detail;
  constexpr int kD = 128, kC = 16;
  const int head = int(blockIdx.x / kRopeCluster), row = lane / kC, c = lane % kC, c0 = 8 * c;
  const bool live = row < a.m;
  if (lane == 0) mbar_arrive_expect_tx(bar, unsigned(splits * a.m * kRopeRangeFloats / kRopeRows * sizeof(float)));
  const bool is_q = head < r.hq, is_k = !is_q && head < r.hq + r.hkv;
  const int64_t t = live ? row : 0;
  float nw[8], cs[8], sn[8];  // (requested while the partials land)
  if ((is_q || is_k) && r.q_norm) norm_weights8(r, is_k ? r.k_norm : r.q_norm, c0, nw);
  if (is_q || is_k) {
    const float pos = float(r.positions[t]);
#pragma unroll
    for (int e = 0; e < 8; ++e) rotation_at(r, pos, (c % (kC / 2)) * 8 + e, cs[e], sn[e]);
  }
  const int32_t slot = live && !is_q ? r.slot_mapping[t] : -1;
  mbar_wait(bar, 0);
  const int64_t col = int64_t(head) * kD + c0;  // the product's column
  uint4 raw;
  {
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = 0.f;
    const float* p = parts + (t * kC + c) * 8;
    for (int rg = 0; rg < splits; ++rg) {
      const float4 lo = *reinterpret_cast<const float4*>(p + rg * kRopeRangeFloats);
      const float4 hi = *reinterpret_cast<const float4*>(p + rg * kRopeRangeFloats + 4);
      v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w, v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
    }
    bf16* o = reinterpret_cast<bf16*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = __float2bfloat16_rn(a.bias ? v[e] + __bfloat162float(a.bias[col + e]) : v[e]);
  }
  // (the whole warp takes the same branch: one head)
  if (is_q || is_k) norm_rotate_chunk<kC>(r, r.q_norm != nullptr, raw, nw, cs, sn, c, head_lanes<kC>());
  if (!live) return;
  const int64_t kv_row = int64_t(r.hkv) * kD;
  if (is_q) {
    *reinterpret_cast<uint4*>(static_cast<bf16*>(r.q) + (t * r.hq + head) * kD + c0) = raw;
    return;
  }
  const int kvh = is_k ? head - r.hq : head - r.hq - r.hkv;
  const int64_t off = int64_t(kvh) * kD + c0;
  bf16* dst = is_k ? static_cast<bf16*>(r.k) : static_cast<bf16*>(const_cast<void*>(r.v));
  *reinterpret_cast<uint4*>(dst + t * kv_row + off) = raw;
  if (slot < 0 || slot >= r.num_slots) return;
  bf16* cache = static_cast<bf16*>(is_k ? r.k_cache : r.v_cache);
  *reinterpret_cast<uint4*>(cache + slot * kv_row + off) = raw;
}
#endif

template <int kBN, int kXRows, int kStages, bool kGlu = false, bool kRope = false>
__global__ void __launch_bounds__(256, 3)  // three CTAs an SM (registers capped to fit)
    gemm_wgmma_decode_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                             const __grid_constant__ GemmKernelArgs a, int splits,
                             const __grid_constant__ DecodeRope<kRope> rope) {
#if defined(RILL_WGMMA_DEVICE)
  using T = DecodeTile<kBN, kXRows>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ uint64_t landed[kStages];  // the pre-wait fill's weight tiles (phase 0 only)
  __shared__ unsigned is_last;
  // kRope, rank 0: the head's range partials ([range][row][chunk][8]), landing by st.async on rope_bar.
  __shared__ __align__(16) float rope_parts[kRope ? kRopeMaxSplits * kRopeRangeFloats : 1];
  __shared__ __align__(8) uint64_t rope_bar;
  unsigned char* base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* sx = base;                         // kStages × 1 KB, then
  unsigned char* sw = base + kStages * T::kXBytes;  // kStages w tiles (rows 8-63 of an x stage fall here)

  // Work items: (column tile, split range) pairs, item = range · tiles + tile, or one item a tile
  // walking every range (fold schedule, splits == 1 here). Persistent CTAs take items blockIdx.x,
  // + gridDim.x, ...: the producer streams the next item's tiles while the consumers finish one.
  const int tiles = int((a.n + kBN - 1) / kBN), items = tiles * splits;  // (a launch has < 2^31 items)
  const int ktiles = int((a.k + kBK - 1) / kBK);
  const bool split = splits > 1;
  // The CTA's i-th work item, or -1 past its last. kRope: a cluster of C CTAs a head (column tiles
  // 2·head and 2·head + 1), rank r taking tile 2·head + r / (C/2) and its ranges (r % (C/2))·per ...
  // (per = S / (C/2)) in order.
  auto cta_item = [&](int i) -> int {
    if constexpr (kRope) {
      constexpr int kPerTile = kRopeCluster / 2;
      const int per = splits / kPerTile, b = int(blockIdx.x), r = b % kRopeCluster;
      if (i >= per) return -1;
      return ((r % kPerTile) * per + i) * tiles + 2 * (b / kRopeCluster) + r / kPerTile;
    } else {
      const int64_t item = int64_t(blockIdx.x) + int64_t(i) * gridDim.x;
      return item < items ? int(item) : -1;
    }
  };
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
  // From k-panels (GemmArgs::w_panels): rows [row, row + 64) at k0 are 8 contiguous KB, or with kGlu
  // the 4 KB holding gate's or up's 32 rows (32 is a multiple of the swizzle's 8 rows: the same image
  // as the two boxes).
  auto panel_at = [&](int64_t row, int k0) { return a.w + ((k0 / kBK) * a.n + row) * kBK; };
  auto load_w = [&](unsigned char* dst, int k0, int64_t n0, uint64_t* bar, uint64_t policy) {
    if (a.w_panels) {
      if constexpr (kGlu) {
        bulk_copy_hint(dst, panel_at(n0 / 2, k0), T::kWBytes / 2, bar, policy);
        bulk_copy_hint(dst + T::kWBytes / 2, panel_at(inter + n0 / 2, k0), T::kWBytes / 2, bar, policy);
      } else {
        bulk_copy_hint(dst, panel_at(n0, k0), T::kWBytes, bar, policy);
      }
      return;
    }
    if constexpr (kGlu) {
      tma_load_2d_hint(dst, &tw, k0, int(n0 / 2), bar, policy);
      tma_load_2d_hint(dst + T::kWBytes / 2, &tw, k0, int(inter + n0 / 2), bar, policy);
    } else {
      tma_load_2d_hint(dst, &tw, k0, int(n0), bar, policy);
    }
  };

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tx);  // (x is first copied after the wait: its descriptor must not be fetched then)
    tma_prefetch_map(&tw);
    warm_params(a);  // (the consumers' and the epilogue's fields: launch.h)
    if constexpr (kRope) warm_params(rope);
    for (int p = 0; p < kStages; ++p) mbar_init(&landed[p], 1);
    if constexpr (kRope) mbar_init(&rope_bar, 1);
    init_stage_barriers(full, empty, kStages, 4);  // a release per consumer warp (and the init fence)
  }
  __syncthreads();
  // kRope: the barriers are published to the cluster (awaited by the consumers before their pushes).
  if constexpr (kRope) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  if (wg == 0) {
    if (threadIdx.x == 0) {
      const uint64_t evict_first = l2_evict_first_policy();  // for the weight tiles
      int s = 0;
      unsigned phase = 0;
      bool waited = false;
      for (int i = 0, item; (item = cta_item(i)) >= 0; ++i) {
        int64_t n0;
        int range, kt_begin, kt_end;
        item_range(item, n0, range, kt_begin, kt_end);
        int t = kt_begin;
        if (!waited) {  // the first item's weights: requested before waiting for the previous kernel
          const int avail = min(kt_end - kt_begin, kStages);
          const int pro = min(avail, a.prewait_stages);
          // The throttled fill (prewait_fill > prewait_stages): up to `fill` stages requested before
          // the wait, but at most `pro` weight tiles in flight — tile p once tile p - pro has landed
          // (on its own barrier: a stage's full barrier also waits for x, which the wait gates), so
          // the shared memory fills while the previous kernel runs without queueing more requests
          // ahead of its loads than `pro` stages do. After the wait each stage's x is requested
          // (expect_tx, no arrival) and the stage's one arrival follows its weight tile's landing.
          const int fill = max(pro, min(avail, a.prewait_fill));
          if (fill > pro) {
            for (int p = 0; p < fill; ++p) {
              if (p >= pro) mbar_wait(&landed[p - pro], 0u);
              mbar_arrive_expect_tx(&landed[p], T::kWBytes);
              load_w(sw + p * T::kWBytes, (kt_begin + p) * kBK, n0, &landed[p], evict_first);
            }
          } else {
            for (int p = 0; p < pro; ++p) {
              mbar_arrive_expect_tx(&full[p], T::kXBytes + T::kWBytes);
              load_w(sw + p * T::kWBytes, (kt_begin + p) * kBK, n0, &full[p], evict_first);
            }
          }
          pdl_wait();
          if (!a.late_trigger) pdl_trigger();
          waited = true;
          if (fill > pro) {
            for (int p = 0; p < fill; ++p) {
              mbar_expect_tx(&full[p], T::kXBytes);
              tma_load_2d(sx + p * T::kXBytes, &tx, (kt_begin + p) * kBK, 0, &full[p]);
            }
            for (int p = 0; p < fill; ++p) {
              mbar_wait(&landed[p], 0u);
              mbar_arrive(&full[p]);
            }
          } else {
            for (int p = 0; p < pro; ++p) tma_load_2d(sx + p * T::kXBytes, &tx, (kt_begin + p) * kBK, 0, &full[p]);
          }
          t += fill;
          s = fill % kStages;
          phase = fill == kStages ? 1u : 0u;
        }
        for (; t < kt_end; ++t) {
          mbar_wait(&empty[s], phase ^ 1u);
          mbar_arrive_expect_tx(&full[s], T::kXBytes + T::kWBytes);
          load_w(sw + s * T::kWBytes, t * kBK, n0, &full[s], evict_first);
          tma_load_2d(sx + s * T::kXBytes, &tx, t * kBK, 0, &full[s]);
          if (++s == kStages) s = 0, phase ^= 1u;
        }
      }
      if (!waited) pdl_wait();
      // Late trigger: the CTA has requested its last weight tile; the next kernel may launch once
      // every CTA has (its CTAs then take the SMs this grid leaves, without competing with its
      // weight stream; the backend's default). Early (RILL_DECODE_TRIGGER=early): after the wait.
      // At exit (GemmArgs::glu_schedule 2): none — the next kernel launches as this grid completes.
      if (!a.exit_trigger) pdl_trigger();
    } else if (!a.late_trigger) {
      pdl_trigger();
    }
    return;
  }

  pdl_wait();  // before the first global write
  if (!a.late_trigger) pdl_trigger();
  if constexpr (kRope) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const uint32_t x_base = smem_addr(sx), w_base = smem_addr(sw);
  float acc[kBN / 8][4], total[kBN / 8][4];
  int s = 0, prev = 0;
  unsigned phase = 0;
  for (int i = 0, item; (item = cta_item(i)) >= 0; ++i) {
    int64_t n0;
    int range, kt_begin, kt_end;
    item_range(item, n0, range, kt_begin, kt_end);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) total[j][0] = total[j][1] = total[j][2] = total[j][3] = 0.f;
    consume_ranges(acc, total, kt_begin, kt_end, a.tiles_per_split, a.k, full, empty, kStages, s, phase, prev, x_base,
                   T::kXBytes, w_base, T::kWBytes, lane,
                   [](float (&d)[kBN / 8][4], uint64_t xd, uint64_t wd) { wgmma::m64n64k16_ss(d, xd, wd); });
    if constexpr (kRope) {
      // The range's partial (what the split schedule writes to the workspace) into rank 0: chunk j of
      // the tile (its columns 8j .. 8j + 7) is chunk 8·half + j of the head. Rows < M ≤ 2 sit in warp
      // 0's lanes 0-7 (row g, columns 8j + 2·tig + e).
      if (warp == 0 && g < a.m) {
        const int half = int(blockIdx.x % kRopeCluster) / (kRopeCluster / 2);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int at = range * kRopeRangeFloats + (g * 16 + half * 8 + j) * 8 + 2 * tig;
          st_async_cluster(smem_addr(&rope_parts[at]), smem_addr(&rope_bar), 0, make_float2(total[j][0], total[j][1]));
        }
      }
      continue;
    }

    // Accumulator [j][2h + e]: row 16·warp + g + 8h, product column n0 + 8j + 2·tig + e (wgmma.cuh);
    // with kGlu, j < kBN / 16 holds gate's column i0 + 8j + 2·tig + e and j + kBN / 16 up's.
    const int64_t i0 = n0 / 2;  // (kGlu: the item's first output column)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = 16 * warp + g + 8 * h;
      if (row >= a.m) continue;
      // The split partials at 9-64 rows: a column pair a store (8 bytes: the pair is even, as is n, or
      // inter with kGlu), where two 4-byte stores used 16.9 of a sector's 32 bytes (bench/RESULTS.md run
      // BI9): batch-64 decode +3.7% (run BK2). The 8-row stage (batch 1-8) keeps its 4-byte stores: with
      // the pair path its batch-1 decode measured 0.4% slower at 512 keys (BK2, equal at 8,192).
      if (kXRows > 8 && split && a.n % 2 == 0) {
        float* const part = a.ws + (int64_t(range) * a.m + row) * a.n;
        if constexpr (kGlu) {
#pragma unroll
          for (int j = 0; j < kBN / 16; ++j) {
            const int64_t c = i0 + 8 * j + 2 * tig;  // (inter % 32 == 0: c + 1 < inter)
            *reinterpret_cast<float2*>(part + c) = make_float2(total[j][2 * h], total[j][2 * h + 1]);
            *reinterpret_cast<float2*>(part + inter + c) =
                make_float2(total[j + kBN / 16][2 * h], total[j + kBN / 16][2 * h + 1]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const int64_t col = n0 + 8 * j + 2 * tig;  // (even, as n is: col < n means col + 1 < n)
            if (col < a.n) *reinterpret_cast<float2*>(part + col) = make_float2(total[j][2 * h], total[j][2 * h + 1]);
          }
        }
        continue;
      }
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
    } else {
      for (int idx = threadIdx.x - 128; idx < int(a.m) * kBN; idx += 128) {
        const int64_t row = idx / kBN, col = n0 + idx % kBN;
        if (col >= a.n) continue;
        float v = fold_partials(a.ws + row * a.n + col, a.m * a.n, a.splits);
        if (a.bias) v += __bfloat162float(a.bias[col]);
        *out_at(a, row, col) = __float2bfloat16_rn(v);
      }
    }
  }
  if constexpr (kRope) {
    if (warp == 0 && blockIdx.x % kRopeCluster == 0) rope_epilogue(rope, a, splits, rope_parts, &rope_bar, lane);
  }
#else
  __trap();  // not built for sm_90a: the host never launches this (gemm_wgmma_available)
#endif
}

template <int kBN, int kXRows, int kStages, bool kGlu>
constexpr size_t decode_smem_bytes() {
  using T = DecodeTile<kBN, kXRows>;
  return size_t(kStages) * (T::kXBytes + T::kWBytes) + 1024;
}

// CTAs of a variant that fit on one SM (its shared memory and registers).
template <int kBN, int kXRows, int kStages, bool kGlu>
int fitting_per_sm() {
  constexpr auto kernel = gemm_wgmma_decode_kernel<kBN, kXRows, kStages, kGlu>;
  constexpr size_t smem = decode_smem_bytes<kBN, kXRows, kStages, kGlu>();
  static const int per_sm = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int n = 0;
    RILL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 256, smem));
    return std::max(n, 1);
  }();
  return per_sm;
}

// The CTAs a launch keeps resident on one SM: as many as fit, or set_decode_ctas_per_sm's cap.
template <int kBN, int kXRows, int kStages, bool kGlu>
int resident_per_sm() {
  const int per_sm = fitting_per_sm<kBN, kXRows, kStages, kGlu>();
  return g_decode_ctas_per_sm > 0 ? std::min(per_sm, g_decode_ctas_per_sm) : per_sm;
}

// Whether a launch of `tiles` column tiles runs the split schedule: the partials and the per-tile
// counters fit; else one CTA walks every range of its tile.
bool split_schedule(const GemmKernelArgs& a, int64_t tiles, size_t ws_bytes, int64_t num_counters) {
  return a.splits > 1 && a.ws && a.counters && tiles <= num_counters &&
         size_t(a.splits) * size_t(a.m * a.n) * sizeof(float) <= ws_bytes;
}

// Returns whether the split schedule ran (the partials are in a.ws).
template <int kBN, int kXRows, int kStages, bool kGlu = false>
bool launch_decode_variant(const GemmKernelArgs& a, size_t ws_bytes, int64_t num_counters, int num_sms,
                           cudaStream_t stream) {
  constexpr auto kernel = gemm_wgmma_decode_kernel<kBN, kXRows, kStages, kGlu>;
  constexpr size_t smem = decode_smem_bytes<kBN, kXRows, kStages, kGlu>();
  const int resident = resident_per_sm<kBN, kXRows, kStages, kGlu>();  // (sets the shared memory attribute)
  if (a.m > kXRows)
    throw_error(kXRows == 8 ? "[matmul] GEMM configuration 18 (warpgroup decode) takes M <= 8"
                            : "[matmul] GEMM configuration 19 (warpgroup decode) takes M <= 64");
  if (kGlu && (a.n % kBN != 0 || a.ny != 1))
    throw_error("[matmul] the warpgroup decode GEMM's SwiGLU takes 2 x inter rows of w with inter % 32 == 0 and one "
                "output");
  // (weight_tile_map: any bf16 [rows, k] in box_rows × 64-k boxes, x's too.)
  const CUtensorMap tx = weight_tile_map(a.x, a.m, a.k, kXRows);
  const CUtensorMap tw = weight_tile_map(a.w, a.n, a.k, kGlu ? kBN / 2 : kBN, g_decode_l2_promotion);
  const int64_t tiles = (a.n + kBN - 1) / kBN;
  const bool split = split_schedule(a, tiles, ws_bytes, num_counters);
  const int64_t items = tiles * (split ? a.splits : 1);
  // Persistent beyond one wave.
  const int64_t ctas = std::min<int64_t>(items, int64_t(resident) * std::max(num_sms, 1));
  GemmKernelArgs la = a;
  la.defer_fold = a.defer_fold && split;
  launch_pdl(kernel, dim3(unsigned(ctas)), dim3(256), smem, stream, tx, tw, la, split ? a.splits : 1, NoRope{});
  RILL_CUDA_CHECK_LAUNCH();
  return split;
}

// Configuration 18's kernel with the RoPE op in its epilogue (kRope): clusters of kRopeCluster CTAs
// a head, one wave, 11 stages a CTA (two an SM with rank 0's 8 KB of partials). Whether a launch of
// `heads` clusters fits that wave: queried once.
constexpr auto kRopeKernel = gemm_wgmma_decode_kernel<64, 8, 11, false, true>;
constexpr size_t kRopeSmem = decode_smem_bytes<64, 8, 11, false>();
int rope_cluster_slots() {
  static const int slots = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kRopeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kRopeSmem)));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kRopeCluster);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = kRopeSmem;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kRopeCluster;
    attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    RILL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kRopeKernel, &cfg));
    return n;
  }();
  return slots;
}

// The launch settings every decode variant takes: the range's k tiles, the pre-wait depth, the trigger.
GemmKernelArgs decode_kernel_args(const GemmKernelArgs& k) {
  GemmKernelArgs a = k;
  a.tiles_per_split = int(a.ks / kBK);
  const int prewait = k.prewait_stages >= 0 ? k.prewait_stages : g_decode_prewait;
  a.prewait_stages = prewait < 0 ? 1 << 30 : prewait;
  a.prewait_fill = g_decode_prewait_fill;
  a.late_trigger = g_decode_late_trigger || k.exit_trigger;  // (exit: no consumer trigger either)
  return a;
}

// One thread a 16-byte chunk of w (row-major): its place in the k-panels (launch_to_panels).
__global__ void to_panels_kernel(const uint4* __restrict__ w, uint4* __restrict__ panels, int64_t n, int64_t k) {
  const int64_t chunks_per_row = k / 8, total = n * chunks_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / chunks_per_row, chunk = i % chunks_per_row;
    const int c = int(chunk % 8);
    panels[((chunk / 8) * n + row) * 8 + (c ^ int(row % 8))] = w[i];
  }
}

}  // namespace

bool decode_rope_fits(const GemmKernelArgs& k, const RopeArgs& r) {
  static_assert(kRopeMaxSplits * kRopeRangeFloats * sizeof(float) == 8192, "rank 0's partials: 8 KB");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t qw = int64_t(r.hq) * 128, kw = int64_t(r.hkv) * 128;
  return gemm_wgmma_available() && k.m >= 1 && k.m <= kRopeRows && r.tokens == k.m && r.head_dim == 128 &&
         r.rotary_dim == 128 && r.k_cache && r.v_cache && r.v && r.slot_mapping && k.ny == 3 && k.n == qw + 2 * kw &&
         k.ys[0] == r.q && k.ys[1] == r.k && k.ys[2] == r.v && k.y_end[0] == qw && k.y_end[1] == qw + kw &&
         k.splits % (kRopeCluster / 2) == 0 && k.splits <= kRopeMaxSplits && k.ks % kBK == 0 && k.k % 8 == 0 &&
         aligned(r.q) && aligned(r.k) && aligned(r.v) && aligned(r.k_cache) && aligned(r.v_cache) &&
         r.hq + 2 * r.hkv <= rope_cluster_slots();
}

bool launch_gemm_wgmma_decode_rope(const GemmKernelArgs& k, const RopeArgs& r, int num_sms, cudaStream_t stream) {
  if (!decode_rope_fits(k, r)) return false;
  GemmKernelArgs a = decode_kernel_args(k);
  a.ws = nullptr;
  a.counters = nullptr;
  a.defer_fold = false;
  const unsigned heads = unsigned(r.hq + 2 * r.hkv);
  // As many weight bytes requested before the wait as the unfused launch (its persistent CTAs, three
  // an SM, each the decode pre-wait depth): that burst is what streams while the norm before runs
  // (with half the CTAs and the same depth, batch-1 decode lost 2.5% at 512 keys).
  if (a.prewait_stages < (1 << 30)) {
    const int64_t unfused = std::min<int64_t>(int64_t(a.n / 64) * a.splits,
                                              int64_t(resident_per_sm<64, 8, 8, false>()) * std::max(num_sms, 1));
    const int64_t fused = int64_t(heads) * kRopeCluster;
    a.prewait_stages = int(std::min<int64_t>(11, (a.prewait_stages * unfused + fused - 1) / fused));
  }
  const CUtensorMap tx = weight_tile_map(a.x, a.m, a.k, 8);
  const CUtensorMap tw = weight_tile_map(a.w, a.n, a.k, 64, g_decode_l2_promotion);
  launch_pdl_cluster(kRopeKernel, dim3(heads * kRopeCluster), dim3(256), kRopeSmem, stream, dim3(kRopeCluster), tx, tw,
                     a, a.splits, r);
  RILL_CUDA_CHECK_LAUNCH();
  return true;
}

int64_t decode_glu_slots(int64_t m, int num_sms) {
  const int resident = m <= 8    ? resident_per_sm<64, 8, 8, true>()
                       : m <= 16 ? resident_per_sm<64, 16, 7, true>()
                       : m <= 32 ? resident_per_sm<64, 32, 6, true>()
                                 : resident_per_sm<64, 64, 4, true>();
  return int64_t(resident) * std::max(num_sms, 1);
}

bool launch_gemm_wgmma_decode(const GemmKernelArgs& k, int variant, size_t ws_bytes, int64_t num_counters,
                              int num_sms, cudaStream_t stream) {
  if (!gemm_wgmma_available())
    throw_error("[matmul] GEMM configurations 18, 19 need an sm_90 GPU and a build for sm_90a "
                "(RILL_CUDA_ARCHITECTURES=90a)");
  GemmKernelArgs a = decode_kernel_args(k);
  // 64 columns a tile (32 measured slower: 1.50-2.29 vs 1.91-2.67 TB/s on the 8B shapes at M = 1);
  // M ≤ 8: 8 stages of 9 KB (three CTAs an SM). Configuration 19 takes the smallest x stage holding
  // M (at least set_decode_min_x_rows): 16 rows, 7 stages of 10 KB, or 32 rows, 6 stages of 12 KB
  // (three CTAs an SM, like 18), or 64 rows, 6 stages of 16 KB (two; 4 stages fit three but
  // measured 3% slower at batch 64, run U) — the same arithmetic: an A row past the stage feeds
  // only an output row past M, which is never stored.
  // Variant 2: 18 with SwiGLU (y [m, n / 2]; launch_gemm checked the shapes).
  // (Variant 2 always folds: its fold is the SwiGLU.)
  // Fewer work items than two CTAs an SM (the 8B shape's o and down: 256 at batch 1-32): CTAs
  // sized so that at most two fit an SM, with more stages each (set_decode_few_item_stages; same
  // bits): sized three an SM, the block scheduler can stack them three deep where room freed first
  // and leave other SMs with one (docs/design-notes.md).
  const int64_t tiles = (a.n + 63) / 64;
  const bool few = g_decode_few_item_stages != 0 &&
                   tiles * (split_schedule(a, tiles, ws_bytes, num_counters) ? a.splits : 1) <=
                       2 * int64_t(std::max(num_sms, 1));
  if (variant == 0) {
    if (few && g_decode_few_item_stages == 9)
      return launch_decode_variant<64, 8, 9>(a, ws_bytes, num_counters, num_sms, stream);
    if (few && g_decode_few_item_stages == 12)
      return launch_decode_variant<64, 8, 12>(a, ws_bytes, num_counters, num_sms, stream);
    return launch_decode_variant<64, 8, 8>(a, ws_bytes, num_counters, num_sms, stream);
  }
  a.defer_fold = false;
  if (variant == 2) {  // SwiGLU: the x stage of 8, 16, 32 or 64 rows holding M (launch_gemm checked M ≤ 64)
    if (a.m <= 8) return launch_decode_variant<64, 8, 8, true>(a, ws_bytes, num_counters, num_sms, stream);
    if (a.m <= 16) return launch_decode_variant<64, 16, 7, true>(a, ws_bytes, num_counters, num_sms, stream);
    if (a.m <= 32) return launch_decode_variant<64, 32, 6, true>(a, ws_bytes, num_counters, num_sms, stream);
    // 33-64 rows: 4 stages of 16 KB, three CTAs an SM (six would fit two): the fold schedule takes one
    // column tile a CTA and needs them in one wave (decode_glu_fold_fits; the 8B shape's 384 tiles on 396
    // slots), which drops the split partials (12.6 MB at 64 rows, written and read back) and the SwiGLU
    // kernel (bench/RESULTS.md run BI).
    return launch_decode_variant<64, 64, 4, true>(a, ws_bytes, num_counters, num_sms, stream);
  }
  a.defer_fold = k.defer_fold;
  const int64_t rows = std::max<int64_t>(a.m, g_decode_min_x_rows);
  // Few items: 9 stages of 16 or 32 rows (two an SM, 91 / 109 KB) under either non-zero setting;
  // 12 of these wider stages would fit only one. 64 rows already fit only two.
  if (few && rows <= 16) return launch_decode_variant<64, 16, 9>(a, ws_bytes, num_counters, num_sms, stream);
  if (few && rows <= 32) return launch_decode_variant<64, 32, 9>(a, ws_bytes, num_counters, num_sms, stream);
  if (rows <= 16) return launch_decode_variant<64, 16, 7>(a, ws_bytes, num_counters, num_sms, stream);
  if (rows <= 32) return launch_decode_variant<64, 32, 6>(a, ws_bytes, num_counters, num_sms, stream);
  return launch_decode_variant<64, 64, 6>(a, ws_bytes, num_counters, num_sms, stream);
}

}  // namespace rill::cuda::gemm_detail

namespace rill::cuda {
bool panels_fit(int64_t n, int64_t k) { return n > 0 && k > 0 && n % 64 == 0 && k % 64 == 0; }

void launch_to_panels(const void* w, void* panels, int64_t n, int64_t k, cudaStream_t stream) {
  if (!panels_fit(n, k)) throw_error("[matmul] the k-panel layout needs n % 64 == 0 and k % 64 == 0");
  if (w == panels) throw_error("[matmul] launch_to_panels writes to memory other than the weight's");
  const int64_t chunks = n * k / 8;
  const unsigned blocks = unsigned(std::min<int64_t>((chunks + 255) / 256, 65535));
  gemm_detail::to_panels_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(w), static_cast<uint4*>(panels),
                                                            n, k);
  RILL_CUDA_CHECK_LAUNCH();
}

void set_decode_prewait_stages(int stages) { gemm_detail::g_decode_prewait = stages; }
void set_decode_prewait_fill(int stages) { gemm_detail::g_decode_prewait_fill = stages; }
void set_decode_prewait_after_attention(int stages) { gemm_detail::g_decode_prewait_after_attention = stages; }
int decode_prewait_after_attention() { return gemm_detail::g_decode_prewait_after_attention; }
void set_decode_late_trigger(bool late) { gemm_detail::g_decode_late_trigger = late; }
void set_decode_ctas_per_sm(int ctas) { gemm_detail::g_decode_ctas_per_sm = ctas; }
void set_decode_min_x_rows(int rows) { gemm_detail::g_decode_min_x_rows = rows; }
void set_decode_l2_promotion(int bytes) { gemm_detail::g_decode_l2_promotion = bytes; }
void set_decode_few_item_stages(int stages) { gemm_detail::g_decode_few_item_stages = stages; }
}  // namespace rill::cuda
