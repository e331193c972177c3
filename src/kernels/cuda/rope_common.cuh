// kernels/cuda/rope_common.cuh — the per-head RMSNorm and rotary arithmetic of one token's heads,
// shared by rope.cu's kernels and the decode attention that runs the RoPE op inside its blocks
// (attention.cu): both call these functions on the same values in the same order, so a head is
// the same bits wherever it is rotated. Numerics follow HF (rope.cu's header). Device code.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda::rope_detail {

// cos / sin of the pair j at position pos: angle = pos · inv_freq[j] in f32, scaled by
// attention_factor and rounded to bf16 (values a bf16 holds exactly).
__device__ __forceinline__ void rotation_at(const RopeArgs& a, float pos, int j, float& c, float& s) {
  const float ang = pos * a.inv_freq[j];
  float sn, cs;
  sincosf(ang, &sn, &cs);  // one range reduction for both (the values of sinf and cosf)
  c = round_bf16(cs * a.attention_factor);
  s = round_bf16(sn * a.attention_factor);
}

// Elements c..c+7 of a normalized head: x · inv times weight c + i (f32 or bf16, optionally 1 + w),
// x̂ rounded to bf16 before the weight unless norm_fp32_scale — rms_norm_kernel's arithmetic.
// (The weights loaded apart from their use: a decode kernel requests them before its wait.)
__device__ __forceinline__ void norm_weights8(const RopeArgs& a, const void* w, int c, float (&wf)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
    wf[i] = a.norm_f32 ? static_cast<const float*>(w)[c + i] : __bfloat162float(static_cast<const bf16*>(w)[c + i]);
}
__device__ __forceinline__ void normalize8(const RopeArgs& a, const float (&w)[8], bf16* v, float inv) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float wf = a.norm_one_plus ? 1.f + w[i] : w[i];
    const float xhat = __bfloat162float(v[i]) * inv;
    v[i] = __float2bfloat16_rn(a.norm_fp32_scale ? xhat * wf : round_bf16(xhat) * wf);
  }
}
__device__ __forceinline__ void normalize8(const RopeArgs& a, const void* w, int c, bf16* v, float inv) {
  float wf[8];
  norm_weights8(a, w, c, wf);
  normalize8(a, wf, v, inv);
}

// The rotated pair (x1, x2) = (element j, element j + half): three bf16 ops as torch runs them.
__device__ __forceinline__ bf16 rotated_first(float x1, float x2, float c, float s) {
  return __float2bfloat16_rn(round_bf16(x1 * c) + round_bf16(-x2 * s));
}
__device__ __forceinline__ bf16 rotated_second(float x1, float x2, float c, float s) {
  return __float2bfloat16_rn(round_bf16(x2 * c) + round_bf16(x1 * s));
}

// Lanes of one head at full rotary, head_dim 8·kC (64 / 128 / 256): lane c of the head holds its
// 16-byte chunk c. The head's kC lanes of a warp (kC a power of two ≤ 32, aligned).
template <int kC>
__device__ __forceinline__ unsigned head_lanes() {
  const unsigned lane = threadIdx.x % 32;
  return kC == 32 ? 0xffffffffu : ((1u << kC) - 1u) << (lane & ~unsigned(kC - 1));
}

// One head chunk in place: with `norm` (a.q_norm set) the per-head RMSNorm with weights nw (the sum
// of squares of the lane's 8 values in order, then a butterfly over the head's lanes), then the
// rotation with cos / sin cs, sn of pairs j0 .. j0 + 7, j0 = (c % (kC / 2)) · 8 (a chunk's partner,
// head_dim / 2 further, sits kC / 2 lanes away: one shuffle). Every lane of `group` calls it.
template <int kC>
__device__ __forceinline__ void norm_rotate_chunk(const RopeArgs& a, bool norm, uint4& raw, const float (&nw)[8],
                                                  const float (&cs)[8], const float (&sn)[8], int c, unsigned group) {
  constexpr int kD = kC * 8;
  bf16* v = reinterpret_cast<bf16*>(&raw);
  if (norm) {
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float f = __bfloat162float(v[i]);
      ss += f * f;
    }
#pragma unroll
    for (int o = kC / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(group, ss, o);
    const float inv = rsqrtf(ss / float(kD) + a.norm_eps);
    normalize8(a, nw, v, inv);
  }
  uint4 other;
  other.x = __shfl_xor_sync(group, raw.x, kC / 2);
  other.y = __shfl_xor_sync(group, raw.y, kC / 2);
  other.z = __shfl_xor_sync(group, raw.z, kC / 2);
  other.w = __shfl_xor_sync(group, raw.w, kC / 2);
  const bf16* p = reinterpret_cast<const bf16*>(&other);
  const bool first_half = c < kC / 2;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    // (x1, x2) = (element j, element j + half); this lane writes x1' in the first half, x2' in the second.
    const float x1 = __bfloat162float(first_half ? v[e] : p[e]), x2 = __bfloat162float(first_half ? p[e] : v[e]);
    v[e] = first_half ? rotated_first(x1, x2, cs[e], sn[e]) : rotated_second(x1, x2, cs[e], sn[e]);
  }
}

}  // namespace rill::cuda::rope_detail
