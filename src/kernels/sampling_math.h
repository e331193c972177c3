// kernels/sampling_math.h — the scalar pieces of Kernels::sample() that the CPU and CUDA backends
// share so that they implement one definition: the counter-based random stream (a splitmix64
// hash of (seed, step, token): no state, so a draw never depends on which rows share a step), the
// Gumbel noise built from it, and the monotone map of floats to unsigned keys used by the
// top-k/top-p threshold searches. Header-only; host and device.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RILL_HD __host__ __device__ __forceinline__
#else
#define RILL_HD inline
#endif

namespace rill::sampling {

/// splitmix64's finaliser (a bijection on 64 bits with full avalanche).
RILL_HD uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The key of one draw: a sequence's seed and the index of the token being drawn.
RILL_HD uint64_t draw_key(uint64_t seed, uint64_t step) { return mix64(seed ^ mix64(step ^ 0x5851f42d4c957f2dull)); }

/// Uniform in the open interval (0, 1) with 53 random bits, for `token` of the draw `key`.
RILL_HD double uniform(uint64_t key, int32_t token) {
  const uint64_t h = mix64(key ^ mix64(uint64_t(uint32_t(token)) + 0x632be59bd9b4e019ull));
  return (double(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/// Gumbel(0, 1) noise: argmax_i (logit_i + gumbel_i) is a draw from softmax(logits).
RILL_HD double gumbel(uint64_t key, int32_t token) { return -log(-log(uniform(key, token))); }

/// Order-preserving map of a non-NaN float to uint32 (-inf → smallest, +inf → largest).
RILL_HD uint32_t order_key(float x) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(x);
#else
  std::memcpy(&u, &x, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// The processed logit of one token before temperature: repetition penalty (HF: divide positive
/// logits, multiply negative ones), then presence and frequency penalties, then the bias.
RILL_HD float adjust_logit(float x, int32_t output_count, int32_t in_context, float bias, float repetition,
                           float presence, float frequency) {
  if (in_context && repetition != 1.f) x = x > 0.f ? x / repetition : x * repetition;
  if (output_count > 0) x -= frequency * float(output_count) + presence;
  return x + bias;
}

}  // namespace rill::sampling
