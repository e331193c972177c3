// kernels/cuda/gemm_wgmma.cu — the batch-invariant GEMM's kernels on Hopper (sm_90a), for M > 16:
// warpgroup MMA (wgmma) from shared memory fed by the tensor copy engine (TMA), one producer
// warpgroup and two consumer warpgroups, a 128 × 128 output tile, 64-wide k stages, 5 or 6
// stages, one CTA a tile or persistent CTAs (configurations 11-14; 12, persistent with 5 stages,
// is the default once the tiles fill half the SMs: 417-633 / 614-682 TFLOP/s on the 8B shapes at M =
// 512 / 4096 on the H200, against 158-176 for the mma.sync kernel and 775-826 for cuBLASLt), or one
// split range a CTA with the partials folded by gemm.cu's reduction kernel (configuration 15, the
// default for fewer tiles: decode batches of 65-256 rows), and a decode kernel shaped for a weight
// stream (configurations 18, 19: M ≤ 8 / ≤ 64, see below). bench/RESULTS.md has the figures.
//
// Also 128 × 192 tiles (configurations 16, 17: opt-in, on par with 12 since the compact epilogue).
// Measured and dropped: clusters of 2 × 1, 1 × 2 and 2 × 2 tiles sharing x / w tiles by multicast
// copies (2.3x slower; measured before the epilogue was made compact — instruction fetch of the
// old ~130 KB epilogue was what made the 128 × 192 tile slow, and may have been theirs too). Traps
// found on the way: any instruction touching the accumulators between a wgmma's issue and its
// wait makes the compiler wait for the whole chain (ptxas C7517), so the fold and reset of a split
// range live outside the k loop; code run once a tile must stay small (see the epilogue).
//
// Same arithmetic as gemm.cu (see its header): each output's split ranges (gemm_split) are walked
// in order; within a range an accumulator starts at 0 and takes the range's 16-wide k steps in
// increasing order, one wgmma m64n128k16 per step (D = A·B + D over 16 products, as one
// mma.sync m16n8k16 of the tiled kernel); a range's partial is added into a register total when
// the range ends, then the bias, then one rounding to bf16. Whether one wgmma k16 step rounds
// exactly as one mma.sync k16 step is a property of the hardware, not of PTX: it is checked
// bitwise on the device (CudaInvariance.GemmConfigurationsAgree, WgmmaGemmEqualsTiled), and the
// host uses this kernel only where the build carries sm_90a code and the probe kernel ran it.
//
// Layout: x and w tiles are K-major (k contiguous), 64 k = 128 bytes a row, written by the copy
// engine with the 128-byte swizzle the wgmma descriptors name; rows past M or N and k past K
// arrive as zeros (k steps wholly past K are skipped, a half step at K's end is zero-padded,
// as in the tiled kernel). Stages cycle through "full" (copies landed) and "empty" (both
// consumers done reading) mbarriers.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/wgmma_pipeline.cuh"

namespace rill::cuda::gemm_detail {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = kPipeBK;
constexpr int kConsumers = 2;                      // warpgroups of 64 output rows each
constexpr int kThreads = 128 * (1 + kConsumers);   // warpgroup 0 produces
constexpr int kTileBytes = kBM * kBK * 2;          // one x or w stage (kBM == kBN)
// A stage holds an x tile (kBM rows) and a w tile of kN rows (128 or 192), 64 k each.
constexpr size_t smem_bytes(int stages, int kN = kBN) {
  return size_t(stages) * (kTileBytes + size_t(kN) * kBK * 2) + 1024;  // + alignment slack
}
[[maybe_unused]] constexpr int kGroupM = 8;  // raster: 8 row tiles walk the column tiles together (L2 reuse)
static_assert(kBM == kBN, "one tile size for x and w stages");

#if defined(RILL_WGMMA_DEVICE)
// consume_ranges with two accumulator sets (the fold kernels, 128 columns): a split range's partial
// is added into total while the next range's first k tile multiplies into the other set, so the
// wgmma pipeline never drains at a range end (consume_ranges waits for every wgmma there: q/k/v at
// K = 4096 has 8 ranges a tile). Same additions in the same order: each range from 0, its partial
// into total in range order. 192 accumulator registers a thread (the producer hands registers over).
template <class Mma>
__device__ __forceinline__ void consume_ranges_overlapped(float (&acc0)[16][4], float (&acc1)[16][4],
                                                          float (&total)[16][4], int t, int kt_end, int tiles_per_split,
                                                          int64_t k, uint64_t* full, uint64_t* empty, int stages,
                                                          int& s, unsigned& phase, int& prev, uint32_t x_base,
                                                          uint32_t x_stage_bytes, uint32_t w_base,
                                                          uint32_t w_stage_bytes, int lane, Mma mma) {
  bool held = false;  // stage prev is still read by a pending wgmma group
  // k tile t into d: issued and committed; then every group but this one is complete, so the stage
  // of the tile before it is released. A range's first tile starts d with a scale-d 0 step (d =
  // a·b, the value 0 + a·b of a zeroed d): zeroing d here, while the other set's wgmma are in
  // flight, made the compiler serialize every wgmma (C7515).
  auto step = [&](float (&d)[16][4], auto first) {
    mbar_wait(&full[s], phase);
    const int64_t k0 = int64_t(t) * kBK;
    const int steps = int(std::min<int64_t>(kBK / 16, (k - k0 + 15) / 16));
    const uint64_t xd = wgmma::desc_k_major(x_base + uint32_t(s) * x_stage_bytes);
    const uint64_t wd = wgmma::desc_k_major(w_base + uint32_t(s) * w_stage_bytes);
    wgmma::fence();
    if constexpr (decltype(first)::value) wgmma::m64n128k16_ss_set(d, xd, wd);
    else mma(d, xd, wd);
    if (steps == kBK / 16) {
#pragma unroll
      for (int kk = 1; kk < kBK / 16; ++kk) mma(d, wgmma::desc_advance(xd, kk * 32), wgmma::desc_advance(wd, kk * 32));
    } else {
      for (int kk = 1; kk < steps; ++kk) mma(d, wgmma::desc_advance(xd, kk * 32), wgmma::desc_advance(wd, kk * 32));
    }
    wgmma::commit();
    wgmma::wait<1>();
    if (held && lane == 0) mbar_arrive(&empty[prev]);
    held = true;
    prev = s;
    if (++s == stages) s = 0, phase ^= 1u;
    ++t;
  };
  auto fold = [&](float (&d)[16][4]) {  // d's wgmma are complete (pinned after the wait)
    wgmma::pin(d);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) total[j][e] += d[j][e];
  };
  // One range into cur; last (the range before, if any) is folded once cur's first tile is issued.
  auto range = [&](float (&cur)[16][4], float (&last)[16][4], bool fold_last) {
    const int range_end = std::min(kt_end, t + tiles_per_split);
    step(cur, std::true_type{});
    if (fold_last) fold(last);
    while (t < range_end) step(cur, std::false_type{});
  };
  for (bool first = true;; first = false) {
    range(acc0, acc1, !first);
    if (t >= kt_end) {
      wgmma::wait<0>();
      fold(acc0);
      break;
    }
    range(acc1, acc0, true);
    if (t >= kt_end) {
      wgmma::wait<0>();
      fold(acc1);
      break;
    }
  }
  if (lane == 0) mbar_arrive(&empty[prev]);
}
#endif

// kPersistent: one CTA an SM walks output tiles blockIdx.x, + gridDim.x, ...; its producer runs
// into the next tile while the consumers write the last one out. Otherwise one CTA a tile.
// kSplit (one CTA a tile and range; the split schedule of gemm.cu for GEMMs with too few output
// tiles to fill the GPU, decode batches): CTA b computes range b / tiles of tile b % tiles alone
// and writes its partial (0 + p, f32) to the workspace; gemm.cu's reduction kernel then adds the
// ranges in order, the bias and the rounding: the fold schedule's additions.
// kN = 192 (configuration 16, persistent fold schedule): a 128 × 192 output tile, each consumer
// warpgroup 64 × 192 with wgmma m64n192k16 — a sixth less operand traffic from L2 and shared
// memory a multiply than 128 × 128 (whose consumers read 96 bytes of operands a cycle from shared
// memory at the tensor rate while the copies write 64: more than its 128 a cycle). Its 96
// accumulator and 96 total registers a thread fit once the producer warpgroup hands registers to
// the consumers (setmaxnreg 40 / 232).
// kGlu (variant 7, persistent fold schedule): SwiGLU in the epilogue. w is [gate; up] (n = 2·inter
// rows) and y [m, inter]; output tile n0 (of n / 128) takes w rows [n0 / 2, n0 / 2 + 64) of gate
// and the same 64 of up (two 64-row boxes of the w map), so each thread holds g and u of the same
// 16 columns (accumulator columns 0-63 and 64-127) and writes bf16(bf16(silu(bf16(g))) · bf16(u)):
// the gate/up GEMM's rounding, then the SwiGLU kernel's, bit for bit — without the [m, 2·inter]
// product's trip through HBM and the SwiGLU launch (at 4096 tokens on the 8B shape, 302 MB a layer
// of writes and reads).
// The fold kernels with 128 columns (all but kSplit and kN = 192) take consume_ranges_overlapped:
// +1-3% on the 8B shapes at M = 4096 (bench/RESULTS.md run K).
template <int kStages, bool kPersistent, bool kSplit = false, int kN = kBN, bool kGlu = false>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_wgmma_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                      GemmKernelArgs a) {
#if defined(RILL_WGMMA_DEVICE)
  static_assert(kN == kBN || (kN == 192 && kPersistent && !kSplit), "the 192-column tile: persistent, fold");
  static_assert(!kGlu || (kN == kBN && kPersistent && !kSplit), "SwiGLU: 128-column tiles, persistent, fold");
  constexpr bool kOverlap = kN == kBN && !kSplit;  // two accumulator sets (192 registers a thread)
  constexpr bool kMoreRegs = kN != kBN || kOverlap;  // consumers take registers from the producer
  constexpr int kWBytes = kN * kBK * 2;  // one w stage (an x stage is kTileBytes)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  // The swizzle pattern repeats every 1024 bytes: stages start on such a boundary.
  unsigned char* base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* sx = base;
  unsigned char* sw = base + kStages * kTileBytes;

  const int64_t tiles_m = (a.m + kBM - 1) / kBM, tiles_n = (a.n + kN - 1) / kN, num_tiles = tiles_m * tiles_n;
  const int ktiles = int((a.k + kBK - 1) / kBK);
  // Output tile → origin: groups of kGroupM row tiles walk the column tiles together (x and w
  // reused in L2).
  auto origin = [&](int64_t tile, int64_t& m0, int64_t& n0) {
    const int64_t per_group = int64_t(kGroupM) * tiles_n;
    const int64_t first_m = tile / per_group * kGroupM, in_group = tile % per_group;
    const int64_t group_rows = std::min<int64_t>(kGroupM, tiles_m - first_m);
    m0 = (first_m + in_group % group_rows) * kBM;
    n0 = in_group / group_rows * kN;
  };
  const int64_t tile_step = kPersistent ? gridDim.x : num_tiles;
  // This CTA's first output tile and its k tiles [kt_begin, kt_end) (every range but in kSplit).
  const int64_t first_tile = kSplit ? blockIdx.x % num_tiles : blockIdx.x;
  const int range = kSplit ? int(blockIdx.x / num_tiles) : 0;
  const int kt_begin = kSplit ? range * a.tiles_per_split : 0;
  const int kt_end = kSplit ? std::min(ktiles, kt_begin + a.tiles_per_split) : ktiles;
  // Read through a shuffle: the compiler then knows the warpgroup index is warp-uniform, and the
  // consumers' wgmma sit on no divergent path (else it serializes them, warning C7520).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  // One stage's w tile: rows [n0, n0 + kN) of w, or with kGlu gate's 64 and up's 64 (see above).
  auto load_w = [&](unsigned char* dst, int k0, int64_t n0, uint64_t* bar) {
    if constexpr (kGlu) {
      tma_load_2d(dst, &tw, k0, int(n0 / 2), bar);
      tma_load_2d(dst + kWBytes / 2, &tw, k0, int(a.n / 2 + n0 / 2), bar);
    } else {
      tma_load_2d(dst, &tw, k0, int(n0), bar);
    }
  };

  if (threadIdx.x == 0) init_stage_barriers(full, empty, kStages, kConsumers * 4);  // a release per consumer warp
  __syncthreads();

  // Stages are used in turn across the CTA's output tiles: stage s in its round of parity
  // `phase` (the producer's first round waits for nothing: a fresh barrier's phase of parity 1
  // counts as complete).
  if (wg == 0) {
    if constexpr (kMoreRegs) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");  // registers to the consumers
    if (threadIdx.x == 0) {
      int s = 0;
      unsigned phase = 0;
      for (int64_t tile = first_tile; tile < num_tiles; tile += tile_step) {
        int64_t m0, n0;
        origin(tile, m0, n0);
        int t = kt_begin;
        if (tile == first_tile) {
          // The first stages' weights are requested before waiting for the previous kernel (launch.h).
          const int pro = kt_end - kt_begin < kStages ? kt_end - kt_begin : kStages;
          for (int p = 0; p < pro; ++p) {
            mbar_arrive_expect_tx(&full[p], kTileBytes + kWBytes);
            load_w(sw + p * kWBytes, (kt_begin + p) * kBK, n0, &full[p]);
          }
          pdl_wait();
          pdl_trigger();
          for (int p = 0; p < pro; ++p) tma_load_2d(sx + p * kTileBytes, &tx, (kt_begin + p) * kBK, int(m0), &full[p]);
          t += pro;
          s = pro % kStages;
          phase = pro == kStages ? 1u : 0u;
        }
        for (; t < kt_end; ++t) {
          mbar_wait(&empty[s], phase ^ 1u);
          mbar_arrive_expect_tx(&full[s], kTileBytes + kWBytes);
          load_w(sw + s * kWBytes, t * kBK, n0, &full[s]);
          tma_load_2d(sx + s * kTileBytes, &tx, t * kBK, int(m0), &full[s]);
          if (++s == kStages) s = 0, phase ^= 1u;
        }
      }
    } else {
      pdl_trigger();
    }
    return;
  }

  if constexpr (kMoreRegs) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  pdl_wait();  // before the first global write (an earlier kernel may still read y)
  pdl_trigger();
  const int c = wg - 1, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const uint32_t x_base = smem_addr(sx) + uint32_t(c * 64 * 128), w_base = smem_addr(sw);
  float acc[kN / 8][4], total[kN / 8][4];
  float acc1[kOverlap ? kN / 8 : 1][4];
  int s = 0, prev = 0;
  unsigned phase = 0;
  // (kSplit and one CTA a tile: one pass, visibly so to the compiler: the split epilogue's
  // barriers and branches then sit after the last wgmma, not on a path back to one.)
  const int64_t tile_end = kPersistent ? num_tiles : first_tile + 1;
  for (int64_t tile = first_tile; tile < tile_end; tile += tile_step) {
    int64_t m0, n0;
    origin(tile, m0, n0);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) total[j][0] = total[j][1] = total[j][2] = total[j][3] = 0.f;
    if constexpr (kOverlap) {
      consume_ranges_overlapped(acc, acc1, total, kt_begin, kt_end, a.tiles_per_split, a.k, full, empty, kStages, s,
                                phase, prev, x_base, kTileBytes, w_base, kWBytes, lane,
                                [](float (&d)[16][4], uint64_t xd, uint64_t wd) { wgmma::m64n128k16_ss(d, xd, wd); });
    } else {
      consume_ranges(acc, total, kt_begin, kt_end, a.tiles_per_split, a.k, full, empty, kStages, s, phase, prev,
                     x_base, kTileBytes, w_base, kWBytes, lane, [](float (&d)[kN / 8][4], uint64_t xd, uint64_t wd) {
                       if constexpr (kN == 192) wgmma::m64n192k16_ss(d, xd, wd);
                       else wgmma::m64n128k16_ss(d, xd, wd);
                     });
    }

    // Accumulator layout (wgmma.cuh; as mma.sync's per 8 columns): total[j][2h + e] holds row
    // 16·warp + g + 8h, column 8j + 2·tig + e of the warpgroup's 64 × kN tile.
    // Output (row, col) and (row, col + 1): the bias, one rounding to bf16, the store.
    auto write_out = [&](int64_t row, int64_t col, float v0, float v1) {
      if (a.bias) {
        v0 += __bfloat162float(a.bias[col]);
        if (col + 1 < a.n) v1 += __bfloat162float(a.bias[col + 1]);
      }
      bf16* dst = a.ny == 1 ? a.ys[0] + row * a.n + col : out_at(a, row, col);
      if (a.pairs) {
        *reinterpret_cast<uint32_t*>(dst) = float2_to_bf16x2(v0, v1);
      } else {
        dst[0] = __float2bfloat16_rn(v0);
        if (col + 1 < a.n) *out_at(a, row, col + 1) = __float2bfloat16_rn(v1);
      }
    };
    // The common case, compact: the tile's columns all in one output (always with one output;
    // fused outputs whose widths are multiples of the tile), column pairs — its output and row
    // stride are looked up once a tile. (The general loop below, with the output lookup and both
    // store forms inlined for each of the 2·kN/8 pairs, is ~100 KB of straight-line code a tile:
    // instruction-fetch stalls, "no_instruction", were the third stall reason of configuration 12
    // and the first of configuration 16.) Same additions and rounding.
    if constexpr (kGlu) {  // total[j] holds gate column i0 + 8j + 2·tig (+1), total[j + 8] up's
      const int64_t inter = a.n / 2, i0 = n0 / 2, row0 = m0 + c * 64 + warp * 16 + g;
      bf16* const y0 = a.ys[0] + row0 * inter + i0 + tig * 2;
#pragma unroll
      for (int j = 0; j < kN / 16; ++j) {
        const int64_t col = i0 + j * 8 + tig * 2;  // (inter % 64 == 0: col + 1 < inter)
        float bg0 = 0.f, bg1 = 0.f, bu0 = 0.f, bu1 = 0.f;
        if (a.bias) {
          bg0 = __bfloat162float(a.bias[col]), bg1 = __bfloat162float(a.bias[col + 1]);
          bu0 = __bfloat162float(a.bias[inter + col]), bu1 = __bfloat162float(a.bias[inter + col + 1]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 8 * h >= a.m) continue;
          float g0 = total[j][2 * h], g1 = total[j][2 * h + 1];
          float u0 = total[j + kN / 16][2 * h], u1 = total[j + kN / 16][2 * h + 1];
          if (a.bias) g0 += bg0, g1 += bg1, u0 += bu0, u1 += bu1;  // (no + 0.f without one: -0 stays -0)
          const float o0 = swiglu_of_sums(g0, u0), o1 = swiglu_of_sums(g1, u1);
          *reinterpret_cast<uint32_t*>(y0 + 8 * h * inter + j * 8) = float2_to_bf16x2(o0, o1);
        }
      }
      continue;
    }
    int64_t width, end;
    bf16* const y = out_col(a, n0, width, end);
    if (!kSplit && a.pairs && std::min<int64_t>(n0 + kN, a.n) <= end) {
      const int64_t row0 = m0 + c * 64 + warp * 16 + g;
      bf16* const y0 = y + row0 * width + tig * 2;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        const int64_t col = n0 + j * 8 + tig * 2;
        if (col >= a.n) continue;  // (a.pairs: n is even, so col + 1 < n too)
        const float b0 = a.bias ? __bfloat162float(a.bias[col]) : 0.f;
        const float b1 = a.bias ? __bfloat162float(a.bias[col + 1]) : 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 8 * h >= a.m) continue;
          float v0 = total[j][2 * h], v1 = total[j][2 * h + 1];
          if (a.bias) v0 += b0, v1 += b1;  // (no + 0.f without a bias: it would turn -0 into +0)
          *reinterpret_cast<uint32_t*>(y0 + 8 * h * width + j * 8) = float2_to_bf16x2(v0, v1);
        }
      }
      continue;
    }
    // kSplit: this range's partial to the workspace [splits, m, n]; gemm_reduce_kernel (gemm.cu)
    // folds them in range order. (Folding here, in the tile's last CTA, made the compiler
    // serialize every wgmma of the kernel: warning C7520.) Otherwise the outputs.
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + c * 64 + warp * 16 + g + h * 8;
        const int64_t col = n0 + j * 8 + tig * 2;
        if (row >= a.m || col >= a.n) continue;
        if constexpr (kSplit) {
          float* dst = a.ws + (int64_t(range) * a.m + row) * a.n + col;
          if (col + 1 < a.n && a.n % 2 == 0) {
            *reinterpret_cast<float2*>(dst) = make_float2(total[j][2 * h], total[j][2 * h + 1]);
          } else {
            dst[0] = total[j][2 * h];
            if (col + 1 < a.n) dst[1] = total[j][2 * h + 1];
          }
        } else {
          write_out(row, col, total[j][2 * h], total[j][2 * h + 1]);
        }
      }
  }
#else
  __trap();  // not built for sm_90a: the host never launches this (gemm_wgmma_available)
#endif
}

// ---- Decode on warpgroup MMA: configurations 18 (M ≤ 8) and 19 (M ≤ 64) ----
// The same arithmetic with x as A and w as B, as above, but shaped for a weight stream: a work
// item is kBN output columns and one split range (split schedule) or every range in turn (fold
// schedule, when no workspace or counters are given), and at most a wave of persistent CTAs takes
// the items in turn (+4% alone where the items exceed a wave); a CTA's producer thread keeps
// kStages w tiles (kBN = 64 rows × 64 k, 128-byte swizzle) in flight through the tensor copy
// engine, and one consumer warpgroup issues wgmma m64n64k16 from them (32-row tiles measured
// slower). The x stage holds kXRows rows × 64 k (rows past
// M zero-filled by the copy engine). With kXRows < 64 (8, 16, 32: 1, 2, 4 KB) the A operand's 64
// rows run past the stage, so rows kXRows-63 read the bytes that follow it in shared memory —
// whatever they hold, those rows' outputs are never stored, and a row of an MMA's output depends
// on its own row of A only.
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


template <int kBN, int kXRows, int kStages, bool kGlu = false>
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

  if (threadIdx.x == 0) init_stage_barriers(full, empty, kStages, 4);  // a release per consumer warp
  __syncthreads();

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
            mbar_arrive_expect_tx(&full[p], T::kXBytes + T::kWBytes);
            load_w(sw + p * T::kWBytes, (kt_begin + p) * kBK, n0, &full[p], evict_first);
          }
          pdl_wait();
          if (!a.late_trigger) pdl_trigger();
          waited = true;
          for (int p = 0; p < pro; ++p) tma_load_2d(sx + p * T::kXBytes, &tx, (kt_begin + p) * kBK, 0, &full[p]);
          t += pro;
          s = pro % kStages;
          phase = pro == kStages ? 1u : 0u;
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
      pdl_trigger();
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

__global__ void wgmma_probe_kernel(int* out) {
#if defined(RILL_WGMMA_DEVICE)
  *out = 1;
#else
  *out = 0;
#endif
}

// A 2-D bf16 tensor [rows, k] (row stride k) read in box_rows × 64-k boxes with the 128-byte swizzle.
CUtensorMap tile_map(const bf16* p, int64_t rows, int64_t k, int box_rows) {
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(k) * 2};
  const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
  return swizzled_bf16_map(p, 2, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "matmul");
}

}  // namespace

CUtensorMap weight_tile_map(const bf16* w, int64_t rows, int64_t k, int box_rows) {
  return tile_map(w, rows, k, box_rows);
}

int g_decode_prewait = -1;    // set_decode_prewait_stages
int g_decode_ctas_per_sm = 0;  // set_decode_ctas_per_sm
int g_decode_min_x_rows = 16;  // set_decode_min_x_rows
bool g_decode_late_trigger = false;  // set_decode_late_trigger

bool gemm_wgmma_available() {
  static const bool available = [] {
    int dev = 0, major = 0, minor = 0;
    RILL_CUDA_CHECK(cudaGetDevice(&dev));
    RILL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    RILL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major != 9 || minor != 0) return false;  // sm_90a code runs on sm_90 only
    int* d = nullptr;
    int h = 0;
    RILL_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    wgmma_probe_kernel<<<1, 1>>>(d);
    const cudaError_t launched = cudaGetLastError();
    if (launched == cudaSuccess) RILL_CUDA_CHECK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    RILL_CUDA_CHECK(cudaFree(d));
    return launched == cudaSuccess && h == 1;
  }();
  return available;
}

namespace {

template <int kStages, bool kPersistent, bool kSplit = false, int kN = kBN, bool kGlu = false>
void launch_variant(const GemmKernelArgs& a, int num_sms, cudaStream_t stream) {
  constexpr auto kernel = gemm_wgmma_kernel<kStages, kPersistent, kSplit, kN, kGlu>;
  static const bool attr_set = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(smem_bytes(kStages, kN))));
    return true;
  }();
  (void)attr_set;
  // (kGlu: a stage's w tile is two 64-row boxes, gate's and up's.)
  const CUtensorMap tx = tile_map(a.x, a.m, a.k, kBM), tw = tile_map(a.w, a.n, a.k, kGlu ? kN / 2 : kN);
  const int64_t tiles = ((a.m + kBM - 1) / kBM) * ((a.n + kN - 1) / kN);
  const int64_t ctas = kSplit ? tiles * a.splits : kPersistent ? std::min<int64_t>(tiles, std::max(num_sms, 1)) : tiles;
  launch_pdl(kernel, dim3(unsigned(ctas)), dim3(kThreads), smem_bytes(kStages, kN), stream, tx, tw, a);
  RILL_CUDA_CHECK_LAUNCH();
}

// Returns whether the split schedule ran (the partials are in a.ws).
template <int kBN, int kXRows, int kStages, bool kGlu = false>
bool launch_decode_variant(const GemmKernelArgs& a, size_t ws_bytes, int64_t num_counters, int num_sms,
                           cudaStream_t stream) {
  using T = DecodeTile<kBN, kXRows>;
  constexpr auto kernel = gemm_wgmma_decode_kernel<kBN, kXRows, kStages, kGlu>;
  constexpr size_t smem = size_t(kStages) * (T::kXBytes + T::kWBytes) + 1024;
  static const bool attr_set = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)attr_set;
  if (a.m > kXRows)
    throw_error(kXRows == 8 ? "[matmul] GEMM configuration 18 (warpgroup decode) takes M <= 8"
                            : "[matmul] GEMM configuration 19 (warpgroup decode) takes M <= 64");
  if (kGlu && (a.n % kBN != 0 || a.ny != 1))
    throw_error("[matmul] the warpgroup decode GEMM's SwiGLU takes 2 x inter rows of w with inter % 32 == 0 and one "
                "output");
  const CUtensorMap tx = tile_map(a.x, a.m, a.k, kXRows), tw = tile_map(a.w, a.n, a.k, kGlu ? kBN / 2 : kBN);
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
  const int64_t ctas = std::min<int64_t>(items, int64_t(resident) * std::max(num_sms, 1));  // persistent beyond one wave
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
  // (three CTAs an SM, like 18), or 64 rows, 6 stages of 16 KB (two) — the same arithmetic: an
  // A row past the stage feeds only an output row past M, which is never stored.
  // Variant 2: 18 with SwiGLU (y [m, n / 2]; launch_gemm checked the shapes).
  // (Variant 2 always folds: its fold is the SwiGLU.)
  if (variant == 0) return launch_decode_variant<64, 8, 8>(a, ws_bytes, num_counters, num_sms, stream);
  a.defer_fold = false;
  if (variant == 2) return launch_decode_variant<64, 8, 8, true>(a, ws_bytes, num_counters, num_sms, stream);
  a.defer_fold = k.defer_fold;
  const int64_t rows = std::max<int64_t>(a.m, g_decode_min_x_rows);
  if (rows <= 16) return launch_decode_variant<64, 16, 7>(a, ws_bytes, num_counters, num_sms, stream);
  if (rows <= 32) return launch_decode_variant<64, 32, 6>(a, ws_bytes, num_counters, num_sms, stream);
  return launch_decode_variant<64, 64, 6>(a, ws_bytes, num_counters, num_sms, stream);
}

void launch_gemm_wgmma(const GemmKernelArgs& k, int variant, int num_sms, size_t ws_bytes, cudaStream_t stream) {
  if (!gemm_wgmma_available())
    throw_error("[matmul] GEMM configurations 11-17 need an sm_90 GPU and a build for sm_90a "
                "(RILL_CUDA_ARCHITECTURES=90a)");
  GemmKernelArgs a = k;
  a.tiles_per_split = int(a.ks / kBK);
  a.split_schedule = false;
  a.counters = nullptr;
  switch (variant) {
    case 0: launch_variant<5, false>(a, num_sms, stream); return;
    case 1: launch_variant<5, true>(a, num_sms, stream); return;
    case 2: launch_variant<6, false>(a, num_sms, stream); return;
    case 3: launch_variant<6, true>(a, num_sms, stream); return;
    case 4:  // the caller checked the workspace and runs the reduction (gemm.cu)
      if (!a.ws || a.splits < 2 || size_t(a.splits) * size_t(a.m * a.n) * sizeof(float) > ws_bytes)
        throw_error("[matmul] GEMM configuration 15 (split ranges across CTAs) needs 2+ ranges and a workspace "
                    "of splits x M x N floats");
      launch_variant<5, false, true>(a, num_sms, stream);
      return;
    case 5: launch_variant<5, true, false, 192>(a, num_sms, stream); return;
    case 6: launch_variant<4, true, false, 192>(a, num_sms, stream); return;
    case 7:  // SwiGLU epilogue: w [gate; up], y [m, n / 2] (launch_gemm checked the shapes)
      if (a.n % kBN != 0 || a.ny != 1 || !a.pairs)
        throw_error("[matmul] the SwiGLU GEMM needs 2 x inter rows of w with inter % 64 == 0 and one 4-byte "
                    "aligned output");
      launch_variant<5, true, false, kBN, true>(a, num_sms, stream);
      return;
    default: throw_error("[matmul] warpgroup GEMM variant must be 0..7");
  }
}

}  // namespace rill::cuda::gemm_detail

namespace rill::cuda {
void set_decode_prewait_stages(int stages) { gemm_detail::g_decode_prewait = stages; }
void set_decode_late_trigger(bool late) { gemm_detail::g_decode_late_trigger = late; }
void set_decode_ctas_per_sm(int ctas) { gemm_detail::g_decode_ctas_per_sm = ctas; }
void set_decode_min_x_rows(int rows) { gemm_detail::g_decode_min_x_rows = rows; }
}  // namespace rill::cuda
