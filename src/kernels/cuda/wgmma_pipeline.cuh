// kernels/cuda/wgmma_pipeline.cuh — the pieces of the warpgroup GEMM's stage pipeline shared by
// its kernels (gemm_wgmma.cu) and the fused decode MLP block (decode_mlp.cu): stage barriers, the
// consumer warpgroup's walk over k tiles (the invariant arithmetic: per split range from 0, 16-wide
// k steps in order, the partial added into the total in range order), the consumer warpgroup's own
// barrier, and the decode tile's shape. Device code; sm_90a (RILL_WGMMA_DEVICE).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace rill::cuda::gemm_detail {

constexpr int kPipeBK = 64;  // k a stage: 64 bf16 = one 128-byte swizzled row

// A decode work item's tiles: kBN = 64 output columns (one wgmma m64n64k16 a k step) of w, and an
// x stage of kXRows rows (8: one swizzle atom, 1 KB; 64: the whole A operand).
template <int kBN, int kXRows>
struct DecodeTile {
  static_assert(kBN == 64, "one wgmma m64n64k16 a k step");
  static constexpr int kXBytes = kXRows * 128, kWBytes = kBN * 128;
  static_assert(kXRows == 8 || kXRows == 16 || kXRows == 32 || kXRows == 64,
                "an x stage is 1, 2, 4 or 8 swizzle atoms of 8 rows (the A operand's first rows)");
};

#if defined(RILL_WGMMA_DEVICE)
// Fresh stage barriers: "full" completes on `full_arrivals` arrivals (one: the producer's) and the
// stage's bytes, "empty" on one arrival from each of `consumer_warps` warps. Thread 0; the caller
// syncs the CTA after it.
__device__ __forceinline__ void init_stage_barriers(uint64_t* full, uint64_t* empty, int stages, int consumer_warps,
                                                    unsigned full_arrivals = 1) {
  for (int s = 0; s < stages; ++s) {
    mbar_init(&full[s], full_arrivals);
    mbar_init(&empty[s], unsigned(consumer_warps));
  }
  mbar_init_fence();
}
#endif

#if defined(RILL_WGMMA_DEVICE)
// A consumer warpgroup's k tiles [t, kt_end) of one output tile: per split range (tiles_per_split
// k tiles) acc starts at 0 and takes the range's 16-wide k steps in order, one `mma(acc, x
// descriptor, w descriptor)` each, then is added into total. Stage s (of `stages`, parity
// `phase`) holds k tile t; a stage is released (one arrival a warp on empty[]) once the wgmma of
// the tile after it are issued and its own have completed. s, phase and prev carry over to the
// CTA's next output tile. The inner loop's only writer of acc is the wgmma chain, so the compiler
// inserts no wait of its own there (a range's fold and reset sit outside it).
template <int kNT, class Mma>
__device__ __forceinline__ void consume_ranges(float (&acc)[kNT][4], float (&total)[kNT][4], int t, int kt_end,
                                               int tiles_per_split, int64_t k, uint64_t* full, uint64_t* empty,
                                               int stages, int& s, unsigned& phase, int& prev, uint32_t x_base,
                                               uint32_t x_stage_bytes, uint32_t w_base, uint32_t w_stage_bytes,
                                               int lane, Mma mma) {
  for (int range_end = t; t < kt_end;) {
    range_end = std::min(kt_end, range_end + tiles_per_split);
#pragma unroll
    for (int j = 0; j < kNT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const int range_begin = t;
    for (; t < range_end; ++t) {
      mbar_wait(&full[s], phase);
      const int64_t k0 = int64_t(t) * kPipeBK;
      const int steps = int(std::min<int64_t>(kPipeBK / 16, (k - k0 + 15) / 16));
      const uint64_t xd = wgmma::desc_k_major(x_base + uint32_t(s) * x_stage_bytes);
      const uint64_t wd = wgmma::desc_k_major(w_base + uint32_t(s) * w_stage_bytes);
      if (steps == kPipeBK / 16) {  // no branch between the steps: the hardware chains them
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kPipeBK / 16; ++kk)
          mma(acc, wgmma::desc_advance(xd, kk * 32), wgmma::desc_advance(wd, kk * 32));
      } else {  // the tile holding K's end
        wgmma::fence();
        for (int kk = 0; kk < steps; ++kk) mma(acc, wgmma::desc_advance(xd, kk * 32), wgmma::desc_advance(wd, kk * 32));
      }
      wgmma::commit();
      // k tile t - 1's multiplies are done: its stage may be refilled. (No instruction may touch
      // acc here: tile t's multiplies still write it, and the compiler would wait for them.)
      wgmma::wait<1>();
      if (t > range_begin && lane == 0) mbar_arrive(&empty[prev]);
      prev = s;
      if (++s == stages) s = 0, phase ^= 1u;
    }
    // The range ended: add its partial into the total in range order.
    wgmma::wait<0>();
    wgmma::pin(acc);
    if (lane == 0) mbar_arrive(&empty[prev]);
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) total[j][e] += acc[j][e];
  }
}
#endif

#if defined(RILL_WGMMA_DEVICE)
// The consumer warpgroup's own barrier (threads 128-255; the producer warpgroup does not take part).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
#endif

}  // namespace rill::cuda::gemm_detail
