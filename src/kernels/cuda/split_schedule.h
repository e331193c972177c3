// kernels/cuda/split_schedule.h — how many blocks the invariant decode attention's split schedule gives each
// (m-tile, row, kv head) (attention_decode.cu). Host code, so that a CPU test checks the rule
// (tests/kernels/cuda/runtime_test.cpp). Any step gives the same bits: a span's partial is computed from
// scratch whichever block walks it.
#pragma once

#include <cstdint>

namespace rill::cuda::attention_detail {

// units: (m-tile, row, kv head) triples; slots: split blocks resident at once (SMs × blocks an SM);
// spans: the block table's spans of a row (graph-stable). Block b of a unit walks spans b, b + step, ...
//
// A split block's time is its walk, one latency-bound span after the other, plus its start (the table,
// the first K/V round trips: about half a span's time), so the attention takes about
// waves · (⌈spans / step⌉ + ½) span times. The candidates are the largest step that fits one wave and the
// largest that fits two: one wave (the rule before) unless its blocks walk so far that two waves of
// shorter walks end sooner; the fewer waves among equal costs. Where a wave holds at most one block a
// unit, 1 (the caller runs the fold kernel: the same walk without partials and combine).
//
// Why two waves at all: at batch 32 of the 8B shape a wave holds 2.58 blocks a unit, so 2 blocks each
// walked 5 of 9 spans at 512 keys with a fifth of the slots empty; 5 blocks in two waves walk 2.
// Measured on an H100 (run BH): batch 32 +1.4% at 512 keys, +2.5% at 2,048 (10 blocks, four waves:
// +1.0%, +3.4%); batch 16 keeps its one wave of 5 (two of 10: −1%), batch 64 its fold kernel (split
// schedules of 3-10 blocks: −6.5 to −7.4%). More waves are not candidates: a block a span (a step of
// `spans`, up to dozens of waves) would win a cost without the start term, and that term is a fit to
// these few points, not a measured constant. Every other measured shape keeps the old step.
inline int64_t split_span_step(int64_t spans, int64_t units, int64_t slots) {
  if (spans <= 1 || units <= 0 || slots < 2 * units) return 1;
  const auto step_in = [&](int64_t waves) { return spans < waves * slots / units ? spans : waves * slots / units; };
  // Twice the cost, in half spans: waves · (2⌈spans / step⌉ + 1).
  const auto cost2 = [&](int64_t step) {
    return (units * step + slots - 1) / slots * (2 * ((spans + step - 1) / step) + 1);
  };
  const int64_t one = step_in(1), two = step_in(2);
  return cost2(two) < cost2(one) ? two : one;
}

}  // namespace rill::cuda::attention_detail
