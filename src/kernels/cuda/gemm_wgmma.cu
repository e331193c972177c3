// kernels/cuda/gemm_wgmma.cu — the batch-invariant GEMM's kernels on Hopper (sm_90a), for M > 16:
// warpgroup MMA (wgmma) from shared memory fed by the tensor copy engine (TMA), one producer
// warpgroup and two consumer warpgroups, a 128 × 128 output tile, 64-wide k stages, 5 or 6
// stages, one CTA a tile or persistent CTAs (configurations 11-14; 12, persistent with 5 stages,
// is the default once the tiles fill half the SMs: 417-633 / 614-682 TFLOP/s on the 8B shapes at M =
// 512 / 4096 on the H200, against 158-176 for the mma.sync kernel and 775-826 for cuBLASLt), or one
// split range a CTA with the partials folded by gemm.cu's reduction kernel (configuration 15, the
// default for fewer tiles: decode batches of 65-256 rows), or the stream schedule (configuration 20,
// stream_walk.h: every CTA the same share of the tiles' split ranges, the default where one row tile's
// tiles would leave SMs idle: q/k/v and gate/up at 65-128 rows). The decode kernel shaped for a weight
// stream (configurations 18, 19: M ≤ 8 / ≤ 64) is in gemm_wgmma_decode.cu. bench/RESULTS.md has
// the figures.
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
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/stream_walk.h"
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
// kMc: a stage is also released on the peer CTA's barrier (multicast pairs: both CTAs' stages hold
// each one's copies).
// `before_fold` runs once, right before the first range's partial is added (the stream schedule: the
// predecessor's total is loaded there, while the next range's first k tile multiplies).
struct NoPrefold {
  __device__ __forceinline__ void operator()() const {}
};
template <bool kMc = false, class Mma, class Prefold = NoPrefold>
__device__ __forceinline__ void consume_ranges_overlapped(float (&acc0)[16][4], float (&acc1)[16][4],
                                                          float (&total)[16][4], int t, int kt_end, int tiles_per_split,
                                                          int64_t k, uint64_t* full, uint64_t* empty, int stages,
                                                          int& s, unsigned& phase, int& prev, uint32_t x_base,
                                                          uint32_t x_stage_bytes, uint32_t w_base,
                                                          uint32_t w_stage_bytes, int lane, unsigned peer, Mma mma,
                                                          Prefold before_fold = {}) {
  auto release = [&](int stage) {
    mbar_arrive(&empty[stage]);
    if constexpr (kMc) mbar_arrive_cluster(&empty[stage], peer);
  };
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
    if (held && lane == 0) release(prev);
    held = true;
    prev = s;
    if (++s == stages) s = 0, phase ^= 1u;
    ++t;
  };
  bool folded = false;
  auto fold = [&](float (&d)[16][4]) {  // d's wgmma are complete (pinned after the wait)
    wgmma::pin(d);
    if (!folded) before_fold(), folded = true;
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
  if (lane == 0) release(prev);
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
// kMc (variants 8, 9: the persistent fold kernels 1 and 7 in clusters of two CTAs, "multicast
// pairs"): the two CTAs of a cluster take the two row tiles of a pair (rows 256·p + [0, 128) and
// + [128, 256)) at the same column tile, in step. Each loads its own x tile and one 64-row half of
// the shared w tile (for SwiGLU the gate box or the up box), which the copy engine writes into both
// CTAs' stages (multicast). L2 then serves 24 KB a CTA and k tile instead of 32: at 128 × 128 tiles
// the L2 is the GEMM's busiest unit (73% of its throughput at 4096³ on the H100, run AT), and its
// queueing is the latency the stages must cover. A stage is refilled once the consumers of both
// CTAs released it (16 arrivals: each consumer warp arrives on its own CTA's barrier and on the
// peer's). Same multiplications and additions in the same order: the same bits.
template <int kStages, bool kPersistent, bool kSplit = false, int kN = kBN, bool kGlu = false, bool kMc = false,
          bool kStream = false>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_wgmma_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                      GemmKernelArgs a) {
#if defined(RILL_WGMMA_DEVICE)
  static_assert(kN == kBN || (kN == 192 && kPersistent && !kSplit), "the 192-column tile: persistent, fold");
  static_assert(!kGlu || (kN == kBN && kPersistent && !kSplit), "SwiGLU: 128-column tiles, persistent, fold");
  static_assert(!kMc || (kN == kBN && kPersistent && !kSplit), "multicast pairs: the persistent fold kernels");
  static_assert(!kStream || (kN == kBN && kPersistent && !kSplit && !kMc), "the stream schedule: persistent, fold");
  constexpr bool kOverlap = kN == kBN && !kSplit;  // two accumulator sets (192 registers a thread)
  constexpr bool kMoreRegs = kN != kBN || kOverlap;  // consumers take registers from the producer
  constexpr int kWBytes = kN * kBK * 2;  // one w stage (an x stage is kTileBytes)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ uint64_t pred_ready;  // kStream: the predecessor's total for this CTA's waiting segment is published
  // The swizzle pattern repeats every 1024 bytes: stages start on such a boundary.
  unsigned char* base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* sx = base;
  unsigned char* sw = base + kStages * kTileBytes;

  // (kMc: the walk is over pairs of row tiles — "tiles" below — and this CTA takes row tile
  // 2·pair + rank; in a last pair past M, rank 1's rows are zero-filled and never stored.)
  const unsigned rank = kMc ? cluster_rank() : 0u;
  constexpr int kRowsPer = kMc ? 2 : 1;
  const int64_t tiles_m = (a.m + kBM * kRowsPer - 1) / (kBM * kRowsPer), tiles_n = (a.n + kN - 1) / kN,
                num_tiles = tiles_m * tiles_n;
  const int ktiles = int((a.k + kBK - 1) / kBK);
  // Output tile → origin: groups of kGroupM row tiles (kMc: kGroupM / 2 pairs) walk the column
  // tiles together (x and w reused in L2).
  auto origin = [&](int64_t tile, int64_t& m0, int64_t& n0) {
    constexpr int64_t kGroup = kGroupM / kRowsPer;
    const int64_t per_group = kGroup * tiles_n;
    const int64_t first_m = tile / per_group * kGroup, in_group = tile % per_group;
    const int64_t group_rows = std::min<int64_t>(kGroup, tiles_m - first_m);
    m0 = ((first_m + in_group % group_rows) * kRowsPer + rank) * kBM;
    n0 = in_group / group_rows * kN;
  };
  const int64_t tile_step = kPersistent ? gridDim.x / kRowsPer : num_tiles;
  // This CTA's first output tile and its k tiles [kt_begin, kt_end) (every range but in kSplit).
  const int64_t first_tile = kSplit ? blockIdx.x % num_tiles : blockIdx.x / kRowsPer;
  const int range = kSplit ? int(blockIdx.x / num_tiles) : 0;
  const int kt_begin = kSplit ? range * a.tiles_per_split : 0;
  const int kt_end = kSplit ? std::min(ktiles, kt_begin + a.tiles_per_split) : ktiles;
  // The CTA's work as a list of segments: one a tile (tiles first_tile, + tile_step, ...), or with
  // kStream the walk's segments 0, 1, ... (StreamWalk), each a tile and its k tiles [kb, ke).
  StreamWalk walk{};
  if constexpr (kStream) walk.init(blockIdx.x, gridDim.x, num_tiles, (ktiles + a.tiles_per_split - 1) / a.tiles_per_split);
  const int64_t seg_begin = kStream ? 0 : first_tile, seg_step = kStream ? 1 : tile_step;
  auto segment = [&](int64_t it, int64_t& tile, int& kb, int& ke, bool& wait, bool& publish) {
    tile = it, kb = kt_begin, ke = kt_end, wait = false, publish = false;
    if constexpr (kStream) {
      int ra, rb;
      walk.at(int(it), tile, ra, rb, wait, publish);
      kb = ra * a.tiles_per_split, ke = std::min(ktiles, rb * a.tiles_per_split);
    }
  };
  // kStream: a published total is 2 × 64 rows × 128 columns of f32 in the workspace, slot c of CTA c,
  // each consumer thread's 64 values at stride 128 (its own registers' order: the reader is the same
  // thread of the next CTA); a.counters[c] counts the consumer warps that stored theirs.
  constexpr int kSlotFloats = kConsumers * 64 * kN;
  constexpr unsigned kPublishers = kConsumers * 4;
  // Read through a shuffle: the compiler then knows the warpgroup index is warp-uniform, and the
  // consumers' wgmma sit on no divergent path (else it serializes them, warning C7520).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  // One stage's w tile: rows [n0, n0 + kN) of w, or with kGlu gate's 64 and up's 64 (see above).
  // (k-panels, GemmArgs::w_panels: tw maps the panels as one [k / 64 · n, 64] matrix, so row `row`
  // at k0 is row k0 / 64 · n + row, column 0. Rows past n in a ragged last tile read the next
  // panel's rows — they feed only output columns past n, never stored.)
  auto load_w = [&](unsigned char* dst, int k0, int64_t n0, uint64_t* bar) {
    const int col = a.w_panels ? 0 : k0;
    auto row = [&](int64_t r) { return int(a.w_panels ? (k0 / kBK) * a.n + r : r); };
    if constexpr (kMc) {  // this CTA's half (64 rows) into both CTAs' stages
      const int64_t r0 = kGlu ? (rank == 0 ? n0 / 2 : a.n / 2 + n0 / 2) : n0 + 64 * int64_t(rank);
      tma_load_2d_multicast(dst + rank * (kWBytes / 2), &tw, col, row(r0), bar, uint16_t(0x3));
    } else if constexpr (kGlu) {
      tma_load_2d(dst, &tw, col, row(n0 / 2), bar);
      tma_load_2d(dst + kWBytes / 2, &tw, col, row(a.n / 2 + n0 / 2), bar);
    } else {
      tma_load_2d(dst, &tw, col, row(n0), bar);
    }
  };

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tx);  // (before the wait: mbarrier.cuh)
    tma_prefetch_map(&tw);
    init_stage_barriers(full, empty, kStages, kConsumers * 4 * kRowsPer);  // a release per consumer warp (kMc: of both CTAs)
    if constexpr (kStream) {
      mbar_init(&pred_ready, 1);
      mbar_init_fence();
    }
  }
  if constexpr (kMc) cluster_sync_all();  // both CTAs' barriers exist before any copy or arrival reaches them
  else __syncthreads();

  // Stages are used in turn across the CTA's output tiles: stage s in its round of parity
  // `phase` (the producer's first round waits for nothing: a fresh barrier's phase of parity 1
  // counts as complete).
  if (wg == 0) {
    if constexpr (kMoreRegs) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");  // registers to the consumers
    if (threadIdx.x == 0) {
      int s = 0;
      unsigned phase = 0;
      const int64_t seg_end = kStream ? walk.count() : num_tiles;
      for (int64_t it = seg_begin; it < seg_end; it += seg_step) {
        int64_t tile, m0, n0;
        int kb, ke;
        bool wait, publish;
        segment(it, tile, kb, ke, wait, publish);
        origin(tile, m0, n0);
        int t = kb;
        if (it == seg_begin) {
          // The first stages' weights are requested before waiting for the previous kernel (launch.h).
          const int pro = ke - kb < kStages ? ke - kb : kStages;
          for (int p = 0; p < pro; ++p) {
            mbar_arrive_expect_tx(&full[p], kTileBytes + kWBytes);
            load_w(sw + p * kWBytes, (kb + p) * kBK, n0, &full[p]);
          }
          pdl_wait();
          pdl_trigger();
          for (int p = 0; p < pro; ++p) tma_load_2d(sx + p * kTileBytes, &tx, (kb + p) * kBK, int(m0), &full[p]);
          t += pro;
          s = pro % kStages;
          phase = pro == kStages ? 1u : 0u;
        }
        for (; t < ke; ++t) {
          mbar_wait(&empty[s], phase ^ 1u);  // (kMc: released by both CTAs' consumers)
          mbar_arrive_expect_tx(&full[s], kTileBytes + kWBytes);
          load_w(sw + s * kWBytes, t * kBK, n0, &full[s]);
          tma_load_2d(sx + s * kTileBytes, &tx, t * kBK, int(m0), &full[s]);
          if (++s == kStages) s = 0, phase ^= 1u;
        }
      }
    } else {
      pdl_trigger();
      if constexpr (kStream) {
        // One thread of the producer warpgroup waits for the predecessor's total (after this grid's
        // wait: the flags were reset by the previous launch's readers) and hands it on to the consumers.
        if (threadIdx.x == 32 && walk.waits()) {
          pdl_wait();
          unsigned* flag = a.counters + (blockIdx.x - 1);
          unsigned v;
          do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
          } while (v < kPublishers);
          *flag = 0u;  // (read once; the next launch's writer counts from 0)
          mbar_arrive(&pred_ready);
        }
      }
    }
    if constexpr (kMc) {  // no CTA leaves while its peer may still copy into it or arrive on its barriers
      __syncwarp();
      cluster_sync_all();
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
  const int64_t tile_end = kStream ? walk.count() : kPersistent ? num_tiles : first_tile + 1;
  for (int64_t it = seg_begin; it < tile_end; it += seg_step) {
    int64_t tile, m0, n0;
    int kb, ke;
    bool wait, publish;
    segment(it, tile, kb, ke, wait, publish);
    origin(tile, m0, n0);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) total[j][0] = total[j][1] = total[j][2] = total[j][3] = 0.f;
    // kStream, a segment after the tile's first ranges: the fold goes on from the predecessor's total,
    // loaded just before the first addition — this segment's first range multiplies meanwhile.
    auto load_pred = [&] {
      if (!(kStream && wait)) return;
      mbar_wait(&pred_ready, 0);
      const float* slot = a.ws + int64_t(blockIdx.x - 1) * kSlotFloats + c * (64 * kN) + (threadIdx.x % 128);
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) total[j][e] = __ldcg(slot + (4 * j + e) * 128);
    };
    if constexpr (kOverlap) {
      consume_ranges_overlapped<kMc>(acc, acc1, total, kb, ke, a.tiles_per_split, a.k, full, empty, kStages,
                                     s, phase, prev, x_base, kTileBytes, w_base, kWBytes, lane, rank ^ 1u,
                                     [](float (&d)[16][4], uint64_t xd, uint64_t wd) { wgmma::m64n128k16_ss(d, xd, wd); },
                                     load_pred);
    } else {
      consume_ranges(acc, total, kb, ke, a.tiles_per_split, a.k, full, empty, kStages, s, phase, prev,
                     x_base, kTileBytes, w_base, kWBytes, lane, [](float (&d)[kN / 8][4], uint64_t xd, uint64_t wd) {
                       if constexpr (kN == 192) wgmma::m64n192k16_ss(d, xd, wd);
                       else wgmma::m64n128k16_ss(d, xd, wd);
                     });
    }

    if (kStream && publish) {  // this tile's first ranges: the total to the successor, no outputs
      float* slot = a.ws + int64_t(blockIdx.x) * kSlotFloats + c * (64 * kN) + (threadIdx.x % 128);
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) __stcg(slot + (4 * j + e) * 128, total[j][e]);
      __syncwarp();
      if (lane == 0) {
        __threadfence();
        atomicAdd(a.counters + blockIdx.x, 1u);
      }
      continue;
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
  if constexpr (kMc) cluster_sync_all();  // (see the producer's)
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
CUtensorMap tile_map(const bf16* p, int64_t rows, int64_t k, int box_rows,
                     CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(k) * 2};
  const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
  return swizzled_bf16_map(p, 2, dims, strides, box, promotion, "matmul");
}

// k-panels (GemmArgs::w_panels) as one [k / 64 · n, 64] matrix of 128-byte rows, copied as they are:
// they hold the swizzled image already.
CUtensorMap panel_map(const bf16* w, int64_t n, int64_t k, int box_rows) {
  const cuuint64_t dims[2] = {cuuint64_t(kBK), cuuint64_t(k / kBK * n)};
  const cuuint64_t strides[1] = {cuuint64_t(kBK) * 2};
  const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
  return bf16_map(w, 2, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_SWIZZLE_NONE, "matmul");
}

}  // namespace

CUtensorMap weight_tile_map(const bf16* w, int64_t rows, int64_t k, int box_rows, int promotion_bytes) {
  const CUtensorMapL2promotion promotion = promotion_bytes >= 256   ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
                                           : promotion_bytes >= 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                           : promotion_bytes >= 64  ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
                                                                    : CU_TENSOR_MAP_L2_PROMOTION_NONE;
  return tile_map(w, rows, k, box_rows, promotion);
}

int stream_flags(int num_sms) { return std::min(std::max(num_sms, 1), 256); }

size_t stream_workspace_bytes(int num_sms) {
  return size_t(stream_flags(num_sms)) * size_t(kConsumers * 64 * kBN) * sizeof(float);
}

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

// Clusters of two CTAs of `kernel` (one an SM) resident at once, at most num_sms / 2.
template <class Kernel>
int resident_pairs(Kernel kernel, size_t smem, int num_sms) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2 * unsigned(std::max(num_sms / 2, 1)));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  RILL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
  return std::max(std::min(clusters, num_sms / 2), 1);
}

template <int kStages, bool kPersistent, bool kSplit = false, int kN = kBN, bool kGlu = false, bool kMc = false,
          bool kStream = false>
void launch_variant(const GemmKernelArgs& a, int num_sms, cudaStream_t stream) {
  constexpr auto kernel = gemm_wgmma_kernel<kStages, kPersistent, kSplit, kN, kGlu, kMc, kStream>;
  static const bool attr_set = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(smem_bytes(kStages, kN))));
    return true;
  }();
  (void)attr_set;
  // (kGlu: a stage's w tile is two 64-row boxes, gate's and up's; kMc: each CTA copies one 64-row half.)
  const int w_box = kGlu || kMc ? kN / 2 : kN;
  const CUtensorMap tx = tile_map(a.x, a.m, a.k, kBM);
  const CUtensorMap tw = a.w_panels ? panel_map(a.w, a.n, a.k, w_box) : tile_map(a.w, a.n, a.k, w_box);
  const int64_t tiles = ((a.m + kBM - 1) / kBM) * ((a.n + kN - 1) / kN);
  if constexpr (kMc) {  // clusters of two CTAs, one a row-tile pair: a persistent walk over the pairs
    // As many clusters as are resident at once (a GPC with an odd count of free SMs leaves one out):
    // a cluster that waited for a second wave would hold its pairs' tiles back to the end.
    static const int resident = resident_pairs(kernel, smem_bytes(kStages, kN), num_sms);
    const int64_t pairs = ((a.m + 2 * kBM - 1) / (2 * kBM)) * ((a.n + kN - 1) / kN);
    const int64_t clusters = std::min<int64_t>({pairs, std::max(num_sms / 2, 1), resident});
    launch_pdl_cluster(kernel, dim3(unsigned(2 * clusters)), dim3(kThreads), smem_bytes(kStages, kN), stream,
                       dim3(2, 1, 1), tx, tw, a);
    RILL_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t ranges = (a.k + a.ks - 1) / a.ks;  // (kStream: a CTA a share of the tiles' ranges)
  const int64_t ctas = kSplit        ? tiles * a.splits
                       : kStream     ? std::min<int64_t>(tiles * ranges, stream_flags(num_sms))  // (one an SM: a flag each)
                       : kPersistent ? std::min<int64_t>(tiles, std::max(num_sms, 1))
                                     : tiles;
  launch_pdl(kernel, dim3(unsigned(ctas)), dim3(kThreads), smem_bytes(kStages, kN), stream, tx, tw, a);
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_gemm_wgmma(const GemmKernelArgs& k, int variant, int num_sms, size_t ws_bytes, cudaStream_t stream) {
  if (!gemm_wgmma_available())
    throw_error("[matmul] GEMM configurations 11-17 need an sm_90 GPU and a build for sm_90a "
                "(RILL_CUDA_ARCHITECTURES=90a)");
  GemmKernelArgs a = k;
  a.tiles_per_split = int(a.ks / kBK);
  a.split_schedule = false;
  if (variant != 10 && variant != 11) a.counters = nullptr;  // (the stream schedule's flags)
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
    case 8: launch_variant<5, true, false, kBN, false, true>(a, num_sms, stream); return;  // 1 in multicast pairs
    case 9:  // 7 in multicast pairs
      if (a.n % kBN != 0 || a.ny != 1 || !a.pairs)
        throw_error("[matmul] the SwiGLU GEMM needs 2 x inter rows of w with inter % 64 == 0 and one 4-byte "
                    "aligned output");
      launch_variant<5, true, false, kBN, true, true>(a, num_sms, stream);
      return;
    case 10:  // 1 on the stream schedule: the caller passes the workspace (slots) and the flags (zeroed)
    case 11:  // 7 on the stream schedule
      if (!a.ws || !a.counters || a.splits < 2 || ws_bytes < stream_workspace_bytes(num_sms))
        throw_error(("[matmul] the stream schedule needs 2+ split ranges, a workspace of " +
                     std::to_string(stream_workspace_bytes(num_sms)) + " bytes and " +
                     std::to_string(stream_flags(num_sms)) + " zeroed flags")
                        .c_str());
      if (variant == 11 && (a.n % kBN != 0 || a.ny != 1 || !a.pairs))
        throw_error("[matmul] the SwiGLU GEMM needs 2 x inter rows of w with inter % 64 == 0 and one 4-byte "
                    "aligned output");
      if (variant == 10) launch_variant<5, true, false, kBN, false, false, true>(a, num_sms, stream);
      else launch_variant<5, true, false, kBN, true, false, true>(a, num_sms, stream);
      return;
    default: throw_error("[matmul] warpgroup GEMM variant must be 0..11");
  }
}

}  // namespace rill::cuda::gemm_detail
