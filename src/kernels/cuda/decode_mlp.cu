// kernels/cuda/decode_mlp.cu — a batch-1 decode step's attention output projection and MLP in one
// persistent kernel (sm_90a): o, add + RMSNorm, gate/up with SwiGLU, down.
//
// Why: unfused, this half of a layer is five launches — three weight streams with two
// latency-bound kernels between them — and each hand-off costs the next projection its ramp and
// the small kernel one memory round trip behind the next GEMM's weight requests (bench/RESULTS.md,
// run L: the o, gate/up and down GEMMs took 86.8 µs a layer for 335 MB, 77.3 at the copy rate, and
// the add + RMSNorm and SwiGLU kernels 6.9 µs more). Here every CTA's producer thread takes work
// items of the three projections in order and requests weight tiles as stages free up,
// never waiting on an input (weights are constant), so the stream runs on across the projections;
// only the x side of a stage waits for its input, published through device-scope counters
// instead of kernel boundaries:
//   - o's items take the attention output (written by the previous kernel: after the wait);
//   - gate/up's items need RMSNorm(residual + o's output) over the whole row: the CTA's x warp
//     waits until every o column tile is folded, then computes the add and the norm itself from the
//     two rows (16 KB from L2) — every CTA with a gate/up item does, which costs less than one more
//     hand-off; the CTA that folds the last gate/up tile writes the sum back (every norm has read
//     the old residual by then);
//   - down's item of split range r needs the SwiGLU outputs [r·ks, (r + 1)·ks): it waits until the
//     gate/up tiles of those columns are folded (a counter per range; gate/up items are taken
//     column tile by column tile, down's range by range, so early ranges are ready early).
// Work: o's items range by range, gate/up's column tile by column tile, down's range by range, in
// one queue (a device counter) that CTAs take from in order as their producer frees up — no item
// waits on a later one, and every CTA is resident (the grid is one wave), so every wait ends.
// Roles in a CTA (256 threads, two an SM by default): thread 0 takes items and streams their w tiles
// by the tensor copy engine into as many stages as shared memory holds (10 at the 8B shape),
// announcing each item to the others through a small ring; warp 1 fills each stage's x side (row 0
// of the 8-row x tile, from the item's input row in shared memory) and arrives on the stage's
// barrier (two arrivals and the w bytes complete a stage); warpgroup 1 runs the decode GEMM's
// consumer loop (wgmma m64n64k16, gemm_wgmma.cu's configuration 18) and hands each item's totals to
// warp 2, which writes the partial, folds a column tile's ranges when it holds the last one, and
// publishes the columns — so the consumers never stop for an L2 round trip.
//
// Status: opt-in (RILL_DECODE_MLP=1), because it measured slower: batch-1 decode 181.5 against 204.3
// tok/s with the four ops, and alone on the 8B shapes 118.9 µs against 110.6 (bench/RESULTS.md run
// N, which has the timelines of each schedule tried). Its trace (DecodeMlpArgs::trace,
// CudaInvariance.DISABLED_DecodeMlpTimeline) shows where: each CTA's stream is bounded by its own
// bytes in flight and its consumers' one dependent wgmma chain (one CTA an SM: 22 GB/s an SM,
// consumer-bound; three: 6 stages each, 2.65 TB/s in all), o's 128 KB items start cold, and down's
// 384 KB items can only start once gate/up's last tiles are folded, so they end in a tail of a
// few CTAs. The unfused decode GEMM keeps three CTAs of 8 stages an SM on one projection at a time.
//
// Bits: each projection is configuration 18's split schedule — the same ranges (gemm_split), the
// same per-range k order, partials folded in range order by the column tile's last item, then one
// rounding; gate/up folds into SwiGLU as its variant 2 does — and the norm is rms_norm_kernel's
// register path (512 threads of 16 elements, a warp butterfly, then the 16 warp sums) replayed by
// one warp over the same values in the same order. CudaInvariance.DecodeMlpEqualsOps checks every
// output bitwise against the unfused ops.
#include <algorithm>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/wgmma_pipeline.cuh"

namespace rill::cuda {
namespace {

using gemm_detail::kPipeBK;
using Tile = gemm_detail::DecodeTile<64, 8>;
constexpr int kBN = 64;
constexpr int kMaxStages = 24;       // one CTA an SM: as many stages as its shared memory holds
[[maybe_unused]] constexpr int kEpiSlots = 4;         // items handed from the consumers to the epilogue warp
constexpr int kMaxSplits = 8;        // gemm_split's most ranges
constexpr int kNormThreads = 512;    // rms_norm_kernel's block for rows of 1025..8192
[[maybe_unused]] constexpr int kNormVirtualWarps = kNormThreads / 32;
[[maybe_unused]] constexpr int kTraceSlots = 128;  // DecodeMlpArgs::trace: a CTA's slots
[[maybe_unused]] constexpr int kTraceItems = 30;
// Items announced by the producer ahead of the x warp and the consumers.
[[maybe_unused]] constexpr int kRing = 4;
// Device counters (DecodeMlpArgs::counters, after the tile counters): the work queue's next item,
// o's folded tiles, gate/up's folded tiles, CTAs done, then per down range its folded SwiGLU tiles.
[[maybe_unused]] constexpr int kFlagNext = 0, kFlagODone = 1, kFlagGuDone = 2, kFlagCtasDone = 3,
                                kFlagActRanges = 4;

struct Proj {
  int64_t n, k;
  int splits, tiles_per_split, tiles, items;
  float* ws;                // [splits, n] partials (gate/up: gate's columns, then up's)
  unsigned* tile_counters;  // [tiles], zero between launches
};

struct MlpKernelArgs {
  Proj p[3];  // o, gate/up (SwiGLU), down
  const bf16* attn;
  bf16* residual;
  const bf16* norm_w;
  bf16* delta;
  bf16* act;
  unsigned* flags;  // kFlag*
  int64_t hidden, inter;
  float eps;
  bool one_plus, fp32_scale, late_trigger;
  int a_bytes;    // the input row buffer's size (the residual buffer follows it)
  int stages;     // ≤ kMaxStages
  unsigned long long* trace;  // null, or kTraceSlots a CTA (DecodeMlpArgs::trace)
};

struct Item {
  int proj, tile, range, kt_begin, kt_end;
};

// The grid's g-th work item: o's items range by range, then gate/up's column tile by column tile
// (a tile's ranges together, so SwiGLU columns are folded early), then down's range by range.
[[maybe_unused]] __device__ __forceinline__ Item item_at(const MlpKernelArgs& a, int g) {
  Item it;
  it.proj = 0;
  if (g >= a.p[0].items) {
    g -= a.p[0].items;
    it.proj = 1;
    if (g >= a.p[1].items) g -= a.p[1].items, it.proj = 2;
  }
  const Proj& p = it.proj == 0 ? a.p[0] : it.proj == 1 ? a.p[1] : a.p[2];
  if (it.proj == 1) it.tile = g / p.splits, it.range = g % p.splits;
  else it.tile = g % p.tiles, it.range = g / p.tiles;
  it.kt_begin = it.range * p.tiles_per_split;
  it.kt_end = min(int(p.k / kPipeBK), it.kt_begin + p.tiles_per_split);
  return it;
}

// Projection i's fields in registers (a dynamic index into the parameters would copy them to the stack).
[[maybe_unused]] __device__ __forceinline__ Proj proj_of(const MlpKernelArgs& a, int i) {
  Proj p = a.p[0];
  if (i == 1) p = a.p[1];
  if (i == 2) p = a.p[2];
  return p;
}


__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every lane spins until *p ≥ target (an acquire per lane: its own later loads see what the
// counted writers wrote before their release).
[[maybe_unused]] __device__ __forceinline__ void wait_count(const unsigned* p, unsigned target) {
  while (load_acquire(p) < target) {
  }
}

// elems bf16 (a multiple of 8) from global src (published data: read at L2) into shared dst, by the
// warp; land_rows waits until every copy the warp issued has landed.
[[maybe_unused]] __device__ __forceinline__ void issue_row(unsigned char* dst, const bf16* src, int64_t elems,
                                                           int lane) {
  for (int64_t c = lane; c < elems / 8; c += 32) cp_async16(dst + c * 16, src + c * 8, true);
}
[[maybe_unused]] __device__ __forceinline__ void land_rows() {
  cp_async_commit();
  cp_async_wait<0>();
  asm volatile("" ::: "memory");
  __syncwarp();
}

#if defined(RILL_WGMMA_DEVICE)
// The x thread's norm: B holds the residual row and A o's output; afterwards B holds their sum
// (the new residual) and A the normalized row. rms_norm_kernel<bf16, 8, 512, 2>'s arithmetic: thread
// t of 512 sums the squares of its elements [8t, 8t + 8) then [8(t + 512), ...) in order, each warp
// butterflies, warp 0 butterflies the 16 warp sums; lane l here plays threads l, l + 32, ...
__device__ __forceinline__ void add_norm_row(const MlpKernelArgs& a, unsigned char* A, unsigned char* B, int lane) {
  const int64_t dim = a.hidden;
  float v = 0.f;  // lane j < 16: virtual warp j's sum (the scratch slot block_sum reads back)
#pragma unroll
  for (int j = 0; j < kNormVirtualWarps; ++j) {
    float acc = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t c = (int64_t(32 * j + lane) + int64_t(h) * kNormThreads) * 8;
      if (c >= dim) continue;
      uint4 xv = *reinterpret_cast<const uint4*>(A + c * 2);
      const uint4 rv = *reinterpret_cast<const uint4*>(B + c * 2);
      bf16* e = reinterpret_cast<bf16*>(&xv);
      const bf16* re = reinterpret_cast<const bf16*>(&rv);
#pragma unroll
      for (int i = 0; i < 8; ++i) e[i] = __float2bfloat16_rn(__bfloat162float(re[i]) + __bfloat162float(e[i]));
      *reinterpret_cast<uint4*>(B + c * 2) = xv;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float f = __bfloat162float(e[i]);
        acc += f * f;
      }
    }
    acc = warp_sum(acc);
    if (lane == j) v = acc;
  }
  const float inv = rsqrtf(warp_sum(v) / float(dim) + a.eps);
#pragma unroll
  for (int j = 0; j < kNormVirtualWarps; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t c = (int64_t(32 * j + lane) + int64_t(h) * kNormThreads) * 8;
      if (c >= dim) continue;
      uint4 xv = *reinterpret_cast<const uint4*>(B + c * 2);
      const uint4 wv = *reinterpret_cast<const uint4*>(a.norm_w + c);
      bf16* e = reinterpret_cast<bf16*>(&xv);
      const bf16* we = reinterpret_cast<const bf16*>(&wv);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float xhat = __bfloat162float(e[i]) * inv;
        e[i] = __float2bfloat16_rn(norm_out(xhat, __bfloat162float(we[i]), a.one_plus, a.fp32_scale));
      }
      *reinterpret_cast<uint4*>(A + c * 2) = xv;
    }
  __syncwarp();
}
#endif

template <int kCtas>  // resident CTAs an SM (registers capped to fit)
__global__ void __launch_bounds__(256, kCtas)
    decode_mlp_kernel(const __grid_constant__ CUtensorMap to, const __grid_constant__ CUtensorMap tgu,
                      const __grid_constant__ CUtensorMap tdn, MlpKernelArgs a) {
#if defined(RILL_WGMMA_DEVICE)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ uint64_t epi_full[kEpiSlots], epi_empty[kEpiSlots];
  __shared__ float epi_vals[kEpiSlots][kBN];
  __shared__ int epi_item[kEpiSlots];
  __shared__ uint64_t ring_full[kRing], ring_empty[kRing];
  __shared__ int ring[kRing];
  unsigned char* base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const int stages = a.stages;
  unsigned char* sx = base;                         // stages x sides (1 KB: 8 rows × 64 k)
  unsigned char* sw = base + stages * Tile::kXBytes;  // stages w tiles (rows 8-63 of an x stage fall here)
  unsigned char* A = sw + stages * Tile::kWBytes;   // the x warp's input row
  unsigned char* B = A + a.a_bytes;                  // the residual row (gate/up's norm)
  const int total = a.p[0].items + a.p[1].items + a.p[2].items;
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);

  if (threadIdx.x == 0) {
    tma_prefetch_map(&to);  // (mbarrier.cuh)
    tma_prefetch_map(&tgu);
    tma_prefetch_map(&tdn);
    for (int q = 0; q < kRing; ++q) {
      mbar_init(&ring_full[q], 1);
      mbar_init(&ring_empty[q], 2);  // read by the x warp and by the consumers
    }
    for (int q = 0; q < kEpiSlots; ++q) {
      mbar_init(&epi_full[q], 1);
      mbar_init(&epi_empty[q], 1);
    }
    gemm_detail::init_stage_barriers(full, empty, stages, 4, 2);  // w's arrival and x's
  }
  __syncthreads();

  if (warp == 0) {  // the weight stream: never waits on an input
    if (lane != 0) return;
    if (!a.late_trigger) pdl_trigger();
    const uint64_t evict_first = l2_evict_first_policy();
    int s = 0;
    unsigned phase = 0;
    for (int q = 0, round = 0;; q = (q + 1) % kRing, round += q == 0) {
      // The next item of the queue (items in order: no CTA's item waits on a later one), announced
      // to this CTA's x warp and consumers through the ring.
      const int g = int(atomicAdd(a.flags + kFlagNext, 1u));
      mbar_wait(&ring_empty[q], unsigned(round & 1) ^ 1u);
      ring[q] = g < total ? g : -1;
      mbar_arrive(&ring_full[q]);
      if (g >= total) break;
      const Item it = item_at(a, g);
      const CUtensorMap* map = it.proj == 0 ? &to : it.proj == 1 ? &tgu : &tdn;
      const int64_t n0 = int64_t(it.tile) * kBN;
      for (int t = it.kt_begin; t < it.kt_end; ++t) {
        mbar_wait(&empty[s], phase ^ 1u);
        mbar_arrive_expect_tx(&full[s], Tile::kWBytes);
        unsigned char* dst = sw + s * Tile::kWBytes;
        if (it.proj == 1) {  // gate's 32 rows and up's same 32 (configuration 18's variant 2)
          tma_load_2d_hint(dst, map, t * kPipeBK, int(n0 / 2), &full[s], evict_first);
          tma_load_2d_hint(dst + Tile::kWBytes / 2, map, t * kPipeBK, int(a.inter + n0 / 2), &full[s], evict_first);
        } else {
          tma_load_2d_hint(dst, map, t * kPipeBK, int(n0), &full[s], evict_first);
        }
        if (++s == stages) s = 0, phase ^= 1u;
      }
    }
    if (a.late_trigger) pdl_trigger();  // every weight tile of this CTA is requested
    return;
  }

  if (warp == 1) {  // the x side: each stage's row 0 from the item's input row
    pdl_wait();     // the attention output, the residual: written by earlier kernels
    int s = 0;
    unsigned phase = 0;
    int held = -1;  // what A holds: 1 the normalized row, 2 + r down's range r (o: reloaded an item)
    for (int q = 0, round = 0, item_no = 0;; q = (q + 1) % kRing, round += q == 0, ++item_no) {
      mbar_wait(&ring_full[q], unsigned(round & 1));
      const int g = ring[q];
      __syncwarp();
      if (lane == 0) mbar_arrive(&ring_empty[q]);
      if (g < 0) break;
      const Item it = item_at(a, g);
      const int64_t k0 = int64_t(it.kt_begin) * kPipeBK, len = int64_t(it.kt_end - it.kt_begin) * kPipeBK;
      int64_t a_first = k0;  // the input element A starts with
      if (it.proj == 0) {
        issue_row(A, a.attn + k0, len, lane);
        land_rows();
        held = -1;
      } else if (it.proj == 1) {
        if (held != 1) {
          wait_count(a.flags + kFlagODone, unsigned(a.p[0].tiles));
          issue_row(B, a.residual, a.hidden, lane);
          issue_row(A, a.delta, a.hidden, lane);
          land_rows();
          add_norm_row(a, A, B, lane);  // (B keeps the new residual: see the last gate/up fold)
          held = 1;
        }
        a_first = 0;
      } else if (held != 2 + it.range) {
        const int64_t end = std::min<int64_t>(k0 + int64_t(a.p[2].tiles_per_split) * kPipeBK, a.inter);
        wait_count(a.flags + kFlagActRanges + it.range, unsigned((end - k0) / (kBN / 2)));
        issue_row(A, a.act + k0, len, lane);
        land_rows();
        held = 2 + it.range;
      }
      if (a.trace && lane == 0 && item_no < kTraceItems)
        a.trace[blockIdx.x * kTraceSlots + 96 + item_no] = global_ns();
      for (int t = it.kt_begin; t < it.kt_end; ++t) {
        mbar_wait(&empty[s], phase ^ 1u);
        if (lane < 8)  // row 0 of the 128-byte swizzle: its 16-byte chunks stay in place
          *reinterpret_cast<uint4*>(sx + s * Tile::kXBytes + lane * 16) =
              *reinterpret_cast<const uint4*>(A + (int64_t(t) * kPipeBK - a_first) * 2 + lane * 16);
        fence_proxy_async_shared();  // visible to wgmma ...
        __syncwarp();
        if (lane == 0) mbar_arrive(&full[s]);  // ... once the stage completes
        if (++s == stages) s = 0, phase ^= 1u;
      }
    }
    return;
  }
  if (warp >= 4) {  // the consumer warpgroup (threads 128-255)
    pdl_wait();  // before the first global write
    const int cw = warp - 4, g4 = lane / 4, tig = lane % 4;
    const uint32_t x_base = smem_addr(sx), w_base = smem_addr(sw);
    float acc[kBN / 8][4], total_acc[kBN / 8][4];
    int s = 0, prev = 0, item_no = 0, eq = 0, eround = 0;
    unsigned phase = 0;
    unsigned long long* trace = a.trace ? a.trace + blockIdx.x * kTraceSlots : nullptr;
    if (trace && threadIdx.x == 128) trace[0] = global_ns();
    for (int q = 0, round = 0;; q = (q + 1) % kRing, round += q == 0, ++item_no) {
      mbar_wait(&ring_full[q], unsigned(round & 1));
      const int g = ring[q];
      gemm_detail::consumer_sync();  // every consumer thread has read it ...
      if (threadIdx.x == 128) mbar_arrive(&ring_empty[q]);  // ... before the slot is released
      if (g < 0) break;
      const Item it = item_at(a, g);
      if (trace && threadIdx.x == 128 && item_no < kTraceItems) {
        trace[1 + 3 * item_no] = unsigned(g);
        trace[2 + 3 * item_no] = global_ns();
      }
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) total_acc[j][0] = total_acc[j][1] = total_acc[j][2] = total_acc[j][3] = 0.f;
      // (One range an item: the range's length and K do not matter beyond kt_end; the projection's
      // fields are read again after the loop, so they hold no registers during it.)
      gemm_detail::consume_ranges(acc, total_acc, it.kt_begin, it.kt_end, it.kt_end - it.kt_begin,
                                  int64_t(it.kt_end) * kPipeBK, full, empty, stages, s, phase, prev, x_base,
                                  Tile::kXBytes, w_base, Tile::kWBytes, lane,
                                  [](float (&d)[kBN / 8][4], uint64_t xd, uint64_t wd) {
                                    wgmma::m64n64k16_ss(d, xd, wd);
                                  });
      if (trace && threadIdx.x == 128 && item_no < kTraceItems) trace[3 + 3 * item_no] = global_ns();  // its k tiles
      // Row 0 is the batch: accumulator [j][e] of lanes g4 = 0 of consumer warp 0 (wgmma.cuh). They go to
      // the epilogue warp's slot; the consumers go on with the next item's stages.
      if (cw == 0) {
        mbar_wait(&epi_empty[eq], unsigned(eround & 1) ^ 1u);
        if (g4 == 0)
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) epi_vals[eq][8 * j + 2 * tig + e] = total_acc[j][e];
        __syncwarp();
        if (lane == 0) {
          epi_item[eq] = g;
          mbar_arrive(&epi_full[eq]);
        }
      }
      if (++eq == kEpiSlots) eq = 0, ++eround;
    }
    if (cw == 0) {  // the end of the queue, for the epilogue warp
      mbar_wait(&epi_empty[eq], unsigned(eround & 1) ^ 1u);
      if (lane == 0) {
        epi_item[eq] = -1;
        mbar_arrive(&epi_full[eq]);
      }
    }
    return;
  }

  // The epilogue warp (warp 2): an item's partial to the workspace; the column tile's last item folds
  // the ranges in order and rounds (SwiGLU for gate/up), then publishes the columns.
  if (warp != 2) return;
  pdl_wait();  // (its writes follow the consumers' wait anyway)
  for (int eq = 0, eround = 0;; eround += (eq = (eq + 1) % kEpiSlots) == 0) {
    mbar_wait(&epi_full[eq], unsigned(eround & 1));
    const int g = epi_item[eq];
    if (g < 0) break;
    const float v0 = epi_vals[eq][2 * lane], v1 = epi_vals[eq][2 * lane + 1];
    __syncwarp();
    if (lane == 0) mbar_arrive(&epi_empty[eq]);
    const Item it = item_at(a, g);
    const Proj p = proj_of(a, it.proj);
    const int64_t n0 = int64_t(it.tile) * kBN;
    float* part = p.ws + int64_t(it.range) * p.n;
    // Slot value 2l, 2l + 1 is product column n0 + 2l (+1); with SwiGLU, product columns 0-31 are
    // gate's output columns n0 / 2 + c and 32-63 up's (configuration 18's variant 2).
    const int64_t c0 = 2 * lane;
    if (it.proj == 1) {
      const int64_t c = n0 / 2 + (c0 % (kBN / 2));
      float* dst = part + (c0 < kBN / 2 ? c : a.inter + c);
      dst[0] = v0;
      dst[1] = v1;
    } else if (n0 + c0 < p.n) {
      part[n0 + c0] = v0;
      part[n0 + c0 + 1] = v1;
    }
    __threadfence();  // this item's partial is visible device-wide before it is counted
    __syncwarp();
    unsigned last = 0;
    if (lane == 0) {
      unsigned* counter = p.tile_counters + it.tile;
      last = atomicAdd(counter, 1u) == unsigned(p.splits - 1);
      if (last) *counter = 0;  // every range arrived: ready for the next launch
    }
    if (!__shfl_sync(0xffffffffu, last, 0)) continue;
    __threadfence();
    // The fold in range order (the loads issued together), then one rounding.
    if (it.proj == 1) {
      const int64_t c = n0 / 2 + lane;  // 32 output columns, one a lane
      const float gv = gemm_detail::fold_partials(p.ws + c, p.n, p.splits);
      const float uv = gemm_detail::fold_partials(p.ws + a.inter + c, p.n, p.splits);
      a.act[c] = __float2bfloat16_rn(swiglu_of_sums(gv, uv));
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t col = n0 + 2 * lane + h;
        if (col < p.n) a.delta[col] = __float2bfloat16_rn(gemm_detail::fold_partials(p.ws + col, p.n, p.splits));
      }
    }
    if (it.proj == 2) continue;
    __threadfence();  // the folded columns are visible device-wide before they are counted
    __syncwarp();
    unsigned last_gu = 0;
    if (lane == 0) {
      if (it.proj == 0) {
        atomicAdd(a.flags + kFlagODone, 1u);
      } else {
        const int64_t range_len = int64_t(a.p[2].tiles_per_split) * kPipeBK;
        atomicAdd(a.flags + kFlagActRanges + int((n0 / 2) / range_len), 1u);
        last_gu = atomicAdd(a.flags + kFlagGuDone, 1u) == unsigned(a.p[1].tiles - 1);
      }
    }
    // The last gate/up tile: every CTA that computed the norm has folded a gate/up tile since, so no
    // one reads the old residual any more; this CTA's norm left the new one in B.
    if (__shfl_sync(0xffffffffu, last_gu, 0))
      for (int64_t c = lane; c < a.hidden / 8; c += 32)
        reinterpret_cast<uint4*>(a.residual)[c] = reinterpret_cast<const uint4*>(B)[c];
  }
  // The last CTA to finish resets the counters for the next launch (no CTA reads them any more:
  // each CTA's producer took its last item before its consumers got the end of the queue).
  if (lane == 0) {
    __threadfence();
    if (atomicAdd(a.flags + kFlagCtasDone, 1u) == gridDim.x - 1) {
      a.flags[kFlagNext] = 0;
      a.flags[kFlagODone] = 0;
      a.flags[kFlagGuDone] = 0;
      for (int r = 0; r < a.p[2].splits; ++r) a.flags[kFlagActRanges + r] = 0;
      a.flags[kFlagCtasDone] = 0;
    }
  }
#else
  __trap();  // not built for sm_90a: the host never launches this (gemm_wgmma_available)
#endif
}

// Shared memory a CTA may take with `ctas` CTAs an SM: the SM's 228 KB less, a CTA, the 1 KB the
// system keeps and the kernel's static barriers and slots (2 KB).
constexpr size_t smem_budget(int ctas) { return size_t(228 * 1024) / size_t(ctas) - 3 * 1024; }
constexpr size_t kMaxSmem = smem_budget(1);
// Resident CTAs an SM: RILL_DECODE_CTAS where given (1..3), else two — each CTA's consumers are one
// dependent wgmma chain (one CTA an SM streamed 2.2 TB/s, consumer-bound), and each CTA's stages are
// what keeps bytes in flight.
int ctas_per_sm() { return gemm_detail::g_decode_ctas_per_sm > 0 ? std::min(gemm_detail::g_decode_ctas_per_sm, 3) : 2; }

struct Plan {
  MlpKernelArgs k{};
  size_t smem = 0;
  int64_t counters = 0, ws_floats = 0;
};

Plan plan_for(const DecodeMlpArgs& a) {
  Plan pl;
  MlpKernelArgs& k = pl.k;
  const int64_t shapes[3][2] = {{a.hidden, a.k_attn}, {2 * a.inter, a.hidden}, {a.hidden, a.inter}};
  int64_t max_range = 0;
  for (int i = 0; i < 3; ++i) {
    Proj& p = k.p[i];
    p.n = shapes[i][0];
    p.k = shapes[i][1];
    const GemmSplit sp = gemm_split(p.n, p.k, a.num_sms);  // the unfused GEMMs' ranges
    p.splits = sp.splits;
    p.tiles_per_split = int(sp.ks / kPipeBK);
    p.tiles = int(p.n / kBN);
    p.items = p.tiles * p.splits;
    p.ws = a.workspace ? a.workspace + pl.ws_floats : nullptr;
    p.tile_counters = a.counters ? a.counters + pl.counters : nullptr;
    pl.ws_floats += int64_t(p.splits) * p.n;
    pl.counters += p.tiles;
    if (i != 1) max_range = std::max(max_range, sp.ks);
  }
  k.flags = a.counters ? a.counters + pl.counters : nullptr;
  pl.counters += kFlagActRanges + k.p[2].splits;
  k.attn = static_cast<const bf16*>(a.attn);
  k.residual = static_cast<bf16*>(a.residual);
  k.norm_w = static_cast<const bf16*>(a.norm_w);
  k.delta = static_cast<bf16*>(a.delta);
  k.act = static_cast<bf16*>(a.act);
  k.hidden = a.hidden;
  k.inter = a.inter;
  k.eps = a.eps;
  k.one_plus = a.one_plus_weight;
  k.fp32_scale = a.scale_in_fp32;
  k.late_trigger = gemm_detail::g_decode_late_trigger;
  k.trace = a.trace;
  k.a_bytes = int(std::max(max_range, a.hidden) * 2);
  const size_t rows = size_t(k.a_bytes) + size_t(a.hidden) * 2 + 1024;  // A, B, alignment slack
  const size_t stage = Tile::kXBytes + Tile::kWBytes;
  const size_t budget = smem_budget(ctas_per_sm());
  k.stages = int(std::min<size_t>(kMaxStages, rows < budget ? (budget - rows) / stage : 0));
  pl.smem = size_t(k.stages) * stage + rows;
  return pl;
}

// Why these arguments cannot run (empty when they can), with the launch plan in pl when it was made.
std::string check(const DecodeMlpArgs& a, Plan& pl) {
  // (Enabled implies available, probed at the backend's start: never a probe inside a capture.)
  if (!gemm_wgmma_enabled())
    return "the fused decode MLP block needs the warpgroup GEMM: an sm_90 GPU, a build for sm_90a and "
           "RILL_GEMM_WGMMA not 0";
  for (int64_t v : {a.hidden, a.k_attn, a.inter})
    if (v <= 0 || v % 64 != 0)
      return "hidden " + std::to_string(a.hidden) + ", attention width " + std::to_string(a.k_attn) +
             " and intermediate size " + std::to_string(a.inter) + " must be multiples of 64";
  if (a.hidden <= 1024 || a.hidden > 2 * kNormThreads * 8)
    return "hidden size " + std::to_string(a.hidden) + " is outside (1024, 8192] (the norm's one-block path)";
  for (const void* p : {a.attn, a.o, a.gate_up, a.down, a.norm_w, static_cast<const void*>(a.residual),
                        static_cast<const void*>(a.delta), static_cast<const void*>(a.act)})
    if (!p || reinterpret_cast<uintptr_t>(p) % 16 != 0) return "every tensor must be 16-byte aligned";
  pl = plan_for(a);
  for (const Proj& p : pl.k.p)
    if (p.splits > kMaxSplits) return "a projection has " + std::to_string(p.splits) + " split ranges (8 at most)";
  if (pl.k.stages < 4)
    return "the row buffers leave room for " + std::to_string(pl.k.stages) + " weight stages (4 needed)";
  if (pl.smem > kMaxSmem)
    return std::to_string(pl.smem) + " bytes of shared memory a CTA exceed " + std::to_string(kMaxSmem);
  if (!a.workspace || size_t(pl.ws_floats) * sizeof(float) > a.workspace_bytes)
    return "the split workspace holds " + std::to_string(a.workspace_bytes) + " bytes, " +
           std::to_string(pl.ws_floats * 4) + " needed";
  if (!a.counters || pl.counters > a.num_counters)
    return std::to_string(a.num_counters) + " counters given, " + std::to_string(pl.counters) + " needed";
  return {};
}
}  // namespace

std::string decode_mlp_unsupported(const DecodeMlpArgs& a) {
  Plan pl;
  return check(a, pl);
}

void launch_decode_mlp(const DecodeMlpArgs& a, cudaStream_t stream) {
  if (!try_launch_decode_mlp(a, stream)) throw_error(("[decode_mlp] " + decode_mlp_unsupported(a)).c_str());
}

bool try_launch_decode_mlp(const DecodeMlpArgs& a, cudaStream_t stream) {
  Plan pl;
  if (!check(a, pl).empty()) return false;
  const int ctas = ctas_per_sm();
  auto* const kernel = ctas == 1 ? decode_mlp_kernel<1> : ctas == 2 ? decode_mlp_kernel<2> : decode_mlp_kernel<3>;
  static size_t smem_set[4] = {};  // each kernel's dynamic shared-memory limit, raised as shapes need
  if (pl.smem > smem_set[ctas]) {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(pl.smem)));
    smem_set[ctas] = pl.smem;
  }
  int per_sm = 0;
  RILL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, pl.smem));
  if (per_sm < 1) throw_error("[decode_mlp] the kernel does not fit an SM");
  const int items = pl.k.p[0].items + pl.k.p[1].items + pl.k.p[2].items;
  // At most one wave: every CTA is resident, so the counters' waits end (see the header).
  const int grid = int(std::min<int64_t>(items, int64_t(per_sm) * std::max(a.num_sms, 1)));
  const CUtensorMap to = gemm_detail::weight_tile_map(static_cast<const bf16*>(a.o), a.hidden, a.k_attn, kBN);
  const CUtensorMap tgu =
      gemm_detail::weight_tile_map(static_cast<const bf16*>(a.gate_up), 2 * a.inter, a.hidden, kBN / 2);
  const CUtensorMap tdn = gemm_detail::weight_tile_map(static_cast<const bf16*>(a.down), a.hidden, a.inter, kBN);
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(256), pl.smem, stream, to, tgu, tdn, pl.k);
  RILL_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace rill::cuda
