// kernels/cpu/rope.cpp — rotary embedding in place on q[T,Hq,D] and k[T,Hkv,D] (rotate-half pairing).
// Matches HF in f32: angle = float(pos) * inv_freq[j] (one rounded product), cos/sin of it in f32,
// both times attention_factor, then x1*c - x2*s and x2*c + x1*s without fused multiply-adds.
// Dims past rotary_dim pass through. The inv_freq table itself is computed by the model layer.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/ops.h"

namespace rill::cpu {
namespace {

// Rotates `heads` vectors of length D at x by the per-pair cos/sin of one token.
void rotate_heads(float* x, int64_t heads, int64_t D, int64_t half, const float* cos_t, const float* sin_t) {
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * D;
    for (int64_t j = 0; j < half; ++j) {
      const float x1 = v[j];
      const float x2 = v[j + half];
      // Two products then one add, as torch's q * cos + rotate_half(q) * sin.
      const float a = x1 * cos_t[j];
      const float b = x2 * sin_t[j];
      const float c = x2 * cos_t[j];
      const float d = x1 * sin_t[j];
      v[j] = a - b;
      v[j + half] = c + d;
    }
  }
}

}  // namespace

void rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) {
  constexpr const char* op = "rope";
  check_tensor(op, "q", q, 3);
  check_tensor(op, "k", k, 3);
  check_tensor(op, "positions", positions, 1);
  check_tensor(op, "table.inv_freq", table.inv_freq, 1);
  check_dtype(op, "q", q, {DType::f32});
  check_dtype(op, "k", k, {DType::f32});
  check_dtype(op, "positions", positions, {DType::i32});
  check_dtype(op, "table.inv_freq", table.inv_freq, {DType::f32});
  const int64_t T = q.size(0), D = q.size(2);
  check_dim(op, "k", k, 0, T);
  check_dim(op, "k", k, 2, D);
  check_dim(op, "positions", positions, 0, T);
  const int64_t rd = table.rotary_dim;
  RILL_ENSURE(rd > 0 && rd % 2 == 0 && rd <= D, "[rope] table.rotary_dim must be even and in (0, {}], got {}", D,
              rd);
  const int64_t half = rd / 2;
  check_dim(op, "table.inv_freq", table.inv_freq, 0, half);
  RILL_ENSURE(std::isfinite(table.attention_factor), "[rope] table.attention_factor must be finite, got {}",
              table.attention_factor);
  check_no_overlap(op, "q", q, "k", k);
  if (T == 0) return;

  const int32_t* pos = positions.data_as<const int32_t>();
  const float* inv_freq = table.inv_freq.data_as<const float>();
  const float factor = table.attention_factor;
  const int64_t Hq = q.size(1), Hkv = k.size(1);
  float* qd = q.data_as<float>();
  float* kd = k.data_as<float>();
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, (Hq + Hkv) * rd));
  ThreadPool::global().parallel_for(T, grain, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> cs;
    if (cs.size() < size_t(2 * half)) cs.resize(size_t(2 * half));
    float* cos_t = cs.data();
    float* sin_t = cs.data() + half;
    for (int64_t t = t0; t < t1; ++t) {
      const float p = float(pos[t]);
      for (int64_t j = 0; j < half; ++j) {
        const float angle = p * inv_freq[j];
        cos_t[j] = std::cos(angle) * factor;
        sin_t[j] = std::sin(angle) * factor;
      }
      rotate_heads(qd + t * Hq * D, Hq, D, half, cos_t, sin_t);
      rotate_heads(kd + t * Hkv * D, Hkv, D, half, cos_t, sin_t);
    }
  });
}

}  // namespace rill::cpu
