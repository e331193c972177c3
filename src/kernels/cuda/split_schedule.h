// kernels/cuda/split_schedule.h — how many blocks the invariant decode attention's split schedule gives each
// (m-tile, row, kv head) (attention_decode.cu). Host code, so that a CPU test checks the rule
// (tests/kernels/cuda/runtime_test.cpp). Any step gives the same bits: a span's partial is computed from
// scratch whichever block walks it.
#pragma once

#include <cstdint>

namespace rill::cuda::attention_detail {

// units: (m-tile, row, kv head) triples; slots: split blocks resident at once (SMs × blocks an SM);
// spans: the block table's spans of a row (graph-stable: a decode graph's width class, a power of two, so its
// rows hold more than half of them). Block b of a unit walks spans b, b + step, ...
//
// A split block's time is its walk, one latency-bound span after the other, plus its start (the table,
// the first K/V round trips: about half a span's time), so the attention takes about
// waves · (⌈spans / step⌉ + ½) span times. The candidates are the largest step that fits one wave (the rule
// before) and the largest that fits two; two waves only where that estimate is at least 10% shorter. Where a
// wave holds at most one block a unit, 1 (the caller runs the fold kernel: the same walk without partials
// and combine).
//
// Why: at batch 32 of the 8B shape a wave holds 2.58 blocks a unit, so one wave is 2 blocks walking half a
// row each with a fifth of the slots empty; two waves of 5 walk a fifth each. Measured on H100s (run BH):
// 5 blocks against 2 at batch 32, +2.5-2.7% at 2,048 keys, ±0.1% at 4,096 (the walk no longer the limit:
// 537 MB of K/V a layer), +1.4% at 512 keys — where the table (16 spans) is twice the rows' 9, so the
// estimate, which only knows the table, keeps 2 (a step is fixed per graph; the rows' spans are not).
// The 10% margin keeps the near ties on the old step (batch 8 and 16 at 4,096-8,192 keys: 2% apart in the
// estimate; batch 16 at 512 keys measured one wave of 5 1% faster than two of 10), and more waves are not
// candidates (a block a span would win the estimate with dozens of waves; its start term is a fit to these
// few points, not a measured constant). Batch 64 keeps the fold kernel (split schedules of 3-10 blocks
// measured 6.5-7.4% slower at 512 keys).
inline int64_t split_span_step(int64_t spans, int64_t units, int64_t slots) {
  if (spans <= 1 || units <= 0 || slots < 2 * units) return 1;
  const auto step_in = [&](int64_t waves) { return spans < waves * slots / units ? spans : waves * slots / units; };
  // Twice the estimate, in half spans: waves · (2⌈spans / step⌉ + 1).
  const auto cost2 = [&](int64_t step) {
    return (units * step + slots - 1) / slots * (2 * ((spans + step - 1) / step) + 1);
  };
  const int64_t one = step_in(1), two = step_in(2);
  return 10 * cost2(two) <= 9 * cost2(one) ? two : one;
}

}  // namespace rill::cuda::attention_detail
