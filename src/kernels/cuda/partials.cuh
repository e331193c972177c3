// kernels/cuda/partials.cuh — reading a GEMM product that is still its split-K partials: the fold
// the split schedule's last CTA of a tile runs (fold_partials), and the same fold run by the op
// that reads the product instead (PartialsIn, ops.h: a batch-1 decode GEMM then ends when its
// ranges are written, without the fence, the arrival count and the partials' round trip before
// its output exists — each on the step's critical path). Device code.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda {

// The split partials p[0], p[stride], ... p[(splits - 1) · stride] of one output added in range order
// from 0 (the split schedule's fold). Up to 8 ranges (gemm_split's most) the loads are requested
// together — one L2 round trip instead of one a range.
__device__ __forceinline__ float fold_partials(const float* p, int64_t stride, int splits) {
  constexpr int kMax = 8;
  float v = 0.f;
  if (splits > kMax) {
    for (int r = 0; r < splits; ++r) v += __ldcg(p + r * stride);
    return v;
  }
  float part[kMax];
#pragma unroll
  for (int r = 0; r < kMax; ++r) part[r] = r < splits ? __ldcg(p + r * stride) : 0.f;
#pragma unroll
  for (int r = 0; r < kMax; ++r)
    if (r < splits) v += part[r];
  return v;
}

// Element (row, c) of a deferred input: the fold, the bias, one rounding (the GEMM's epilogue).
__device__ __forceinline__ bf16 folded(const PartialsIn& p, int64_t row, int64_t c) {
  const int64_t col = p.col0 + c;
  float v = fold_partials(p.ws + row * p.n + col, p.plane, p.splits);
  if (p.bias) v += __bfloat162float(static_cast<const bf16*>(p.bias)[col]);
  return __float2bfloat16_rn(v);
}

// Elements (row, c .. c + 7) as 8 packed bf16 (partials_vec8(p), c % 8 == 0): every range's two
// 16-byte loads requested together, then the same additions per element as folded().
__device__ __forceinline__ uint4 folded8(const PartialsIn& p, int64_t row, int64_t c) {
  constexpr int kMax = 8;
  const int64_t col = p.col0 + c;
  const float* base = p.ws + row * p.n + col;
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = 0.f;
  if (p.splits > kMax) {
    for (int r = 0; r < p.splits; ++r) {
      const float4 a = __ldcg(reinterpret_cast<const float4*>(base + r * p.plane));
      const float4 b = __ldcg(reinterpret_cast<const float4*>(base + r * p.plane + 4));
      v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w, v[4] += b.x, v[5] += b.y, v[6] += b.z, v[7] += b.w;
    }
  } else {
    float4 lo[kMax], hi[kMax];
#pragma unroll
    for (int r = 0; r < kMax; ++r)
      if (r < p.splits) {
        lo[r] = __ldcg(reinterpret_cast<const float4*>(base + r * p.plane));
        hi[r] = __ldcg(reinterpret_cast<const float4*>(base + r * p.plane + 4));
      }
#pragma unroll
    for (int r = 0; r < kMax; ++r)
      if (r < p.splits) {
        v[0] += lo[r].x, v[1] += lo[r].y, v[2] += lo[r].z, v[3] += lo[r].w;
        v[4] += hi[r].x, v[5] += hi[r].y, v[6] += hi[r].z, v[7] += hi[r].w;
      }
  }
  uint4 out;
  bf16* o = reinterpret_cast<bf16*>(&out);
  const bf16* bias = static_cast<const bf16*>(p.bias);
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = __float2bfloat16_rn(bias ? v[i] + __bfloat162float(bias[col + i]) : v[i]);
  return out;
}

// Elements (row, c), (row, c + 1) of a deferred input as bf16 — folded()'s operations on each.
__device__ __forceinline__ __nv_bfloat162 folded2(const PartialsIn& p, int64_t row, int64_t c) {
  constexpr int kMax = 8;
  const int64_t col = p.col0 + c;
  const float* base = p.ws + row * p.n + col;
  float2 part[kMax];
#pragma unroll
  for (int r = 0; r < kMax; ++r)
    if (r < p.splits) part[r] = __ldcg(reinterpret_cast<const float2*>(base + r * p.plane));
  float x = 0.f, y = 0.f;
#pragma unroll
  for (int r = 0; r < kMax; ++r)
    if (r < p.splits) x += part[r].x, y += part[r].y;
  for (int r = kMax; r < p.splits; ++r) {  // (gemm_split takes at most 8 ranges)
    const float2 v = __ldcg(reinterpret_cast<const float2*>(base + r * p.plane));
    x += v.x, y += v.y;
  }
  if (p.bias) {
    x += __bfloat162float(static_cast<const bf16*>(p.bias)[col]);
    y += __bfloat162float(static_cast<const bf16*>(p.bias)[col + 1]);
  }
  return __floats2bfloat162_rn(x, y);
}

}  // namespace rill::cuda
