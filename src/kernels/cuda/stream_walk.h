// kernels/cuda/stream_walk.h — the warpgroup GEMM's stream schedule: which output tiles and split
// ranges each CTA takes (gemm_wgmma.cu, variants 10 and 11). Host and device code, so that a CPU test
// checks the partition (tests/kernels/cuda/runtime_test.cpp).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RILL_STREAM_HD __host__ __device__ __forceinline__
#else
#define RILL_STREAM_HD inline
#endif

namespace rill::cuda::gemm_detail {

// The stream schedule's walk (kStream): a tile's split ranges are its work units, U = tiles · R of them
// in tile-major order, and CTA c of G takes units [c·U/G, (c+1)·U/G) — every SM the same share of the
// multiplies, where one CTA a tile leaves SMs idle in the last round (q/k/v at 256 rows: 96 tiles for
// 132 SMs) and one CTA a range adds f32 partials' round trips and a reduction. A tile split between
// CTAs keeps the fold's order: the CTA holding its first ranges adds them into its total from 0 and
// publishes that total (the slot of CTA c, flag c); the CTA holding the next ranges starts its total
// from the published one and adds its own ranges in order. The same additions in the same order as
// one CTA walking every range: the same bits. A CTA runs its shared last tile's early ranges first
// (published as soon as possible) and its shared first tile's later ranges last (whose predecessor
// published them at its own start), so no CTA waits long. At most one segment a CTA waits and at most
// one publishes.
struct StreamWalk {
  int64_t t_first, t_last, full_begin, full_end;
  int r0, r1, ranges;  // the chunk starts at range r0 of t_first and ends before range r1 of t_last (0: a tile's end)
  bool head, tail;  // segment 0: the early ranges of t_last, up to r1 (published); last: [r0, R) of t_first

  RILL_STREAM_HD void init(int64_t c, int64_t g, int64_t tiles, int num_ranges) {
    ranges = num_ranges;
    const int64_t units = tiles * num_ranges, u0 = c * units / g, u1 = (c + 1) * units / g;
    t_first = u0 / num_ranges, t_last = (u1 - 1) / num_ranges;
    r0 = int(u0 % num_ranges), r1 = int(u1 % num_ranges);
    head = r1 > 0;
    tail = r0 > 0 && (t_first != t_last || r1 == 0);
    full_begin = t_first + (r0 > 0 ? 1 : 0);
    const int64_t end = t_last + (r1 == 0 ? 1 : 0);
    full_end = end > full_begin ? end : full_begin;
  }
  RILL_STREAM_HD int count() const { return int(head) + int(full_end - full_begin) + int(tail); }
  // Whether a segment starts from the predecessor's total (the tail, or a head inside one tile).
  RILL_STREAM_HD bool waits() const { return tail || (head && t_first == t_last && r0 > 0); }
  // Segment i: its tile, its ranges [ra, rb), whether it starts from the predecessor's total and
  // whether it publishes its own (else it writes the outputs).
  RILL_STREAM_HD void at(int i, int64_t& tile, int& ra, int& rb, bool& wait, bool& publish) const {
    if (head && i == 0) {
      tile = t_last, ra = t_first == t_last ? r0 : 0, rb = r1, wait = ra > 0, publish = true;
      return;
    }
    i -= int(head);
    if (i < full_end - full_begin) {
      tile = full_begin + i, ra = 0, rb = ranges, wait = false, publish = false;
      return;
    }
    tile = t_first, ra = r0, rb = ranges, wait = true, publish = false;
  }
};

}  // namespace rill::cuda::gemm_detail
