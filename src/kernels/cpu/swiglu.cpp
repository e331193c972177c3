// kernels/cpu/swiglu.cpp — y[M,I] = silu(x[M,:I]) * x[M,I:] in f32 (Highway dispatch).
// silu(g) = g / (1 + exp(-g)) as torch computes it; exp is Highway's (≤ 1 ulp), with -g clamped
// at 100 so that very negative gates give exp = inf and silu = -0 as in std::exp.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/swiglu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/cpu/simd-inl.h"

#include <cmath>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace rill::cpu {
namespace HWY_NAMESPACE {

void SwigluRows(const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t I, int64_t m0, int64_t m1) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const VF one = hn::Set(df, 1.f);
  const VF limit = hn::Set(df, 100.f);
  for (int64_t m = m0; m < m1; ++m) {
    const float* gate = x + m * 2 * I;
    const float* up = gate + I;
    float* out = y + m * I;
    int64_t i = 0;
    for (; i + lanes <= I; i += lanes) {
      const VF g = hn::LoadU(df, gate + i);
      const VF e = hn::Exp(df, hn::Min(hn::Neg(g), limit));
      hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(df, up + i)), df, out + i);
    }
    for (; i < I; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace rill::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/ops.h"

namespace rill::cpu {

HWY_EXPORT(SwigluRows);

void swiglu(const Tensor& x, Tensor& y) {
  constexpr const char* op = "swiglu";
  check_tensor(op, "x", x, 2);
  check_tensor(op, "y", y, 2);
  check_dtype(op, "x", x, {DType::f32});
  check_dtype(op, "y", y, {DType::f32});
  const int64_t M = x.size(0), I = y.size(1);
  check_dim(op, "y", y, 0, M);
  RILL_ENSURE(x.size(1) == 2 * I, "[swiglu] x: expected [{}, {}] (gate and up of y {}), got {}", M, 2 * I,
              y.describe(), x.describe());
  check_no_overlap(op, "y", y, "x", x);
  const float* xs = x.data_as<const float>();
  float* ys = y.data_as<float>();
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, I));
  ThreadPool::global().parallel_for(
      M, grain, [&](int64_t m0, int64_t m1) { HWY_DYNAMIC_DISPATCH(SwigluRows)(xs, ys, I, m0, m1); });
}

}  // namespace rill::cpu
#endif  // HWY_ONCE
