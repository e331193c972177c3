// kernels/cpu/norm.cpp — rms_norm and add_rms_norm over rows of f32 activations (Highway dispatch).
// y = x * rsqrt(mean(x²) + eps) * w (or * (1 + w)), as HF computes it in f32: the whole row is read
// for the sum of squares before y is written, so y may alias x. Weights are f32 or bf16.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/norm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <cmath>
#include <cstdint>

#ifndef RILL_KERNELS_CPU_NORM_ARGS
#define RILL_KERNELS_CPU_NORM_ARGS
namespace rill::cpu {
struct NormArgs {
  float* residual = nullptr;  // [M, D]; when set, residual += x first and the norm reads residual
  const float* x = nullptr;   // [M, D]
  const void* w = nullptr;    // [D], f32 or bf16 bits
  bool w_bf16 = false;
  bool one_plus_weight = false;
  float eps = 0.f;
  float* y = nullptr;  // [M, D]
  int64_t D = 0;
};
}  // namespace rill::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace rill::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <typename W>
void NormRowsT(const NormArgs& a, int64_t r0, int64_t r1) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const int64_t D = a.D;
  const int64_t d_vec = D - D % lanes;
  const W* w = static_cast<const W*>(a.w);
  const VF one = hn::Set(df, 1.f);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = a.x + r * D;
    if (a.residual) {
      float* res = a.residual + r * D;
      int64_t d = 0;
      for (; d < d_vec; d += lanes) hn::StoreU(hn::Add(hn::LoadU(df, res + d), hn::LoadU(df, x + d)), df, res + d);
      for (; d < D; ++d) res[d] += x[d];
      x = res;
    }
    VF acc = hn::Zero(df);
    int64_t d = 0;
    for (; d < d_vec; d += lanes) {
      const VF v = hn::LoadU(df, x + d);
      acc = hn::MulAdd(v, v, acc);
    }
    float ss = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; d < D; ++d) ss += x[d] * x[d];
    const float inv = 1.f / std::sqrt(ss / float(D) + a.eps);
    const VF vinv = hn::Set(df, inv);
    float* y = a.y + r * D;
    for (d = 0; d < d_vec; d += lanes) {
      VF wv = LoadW(df, w + d);
      if (a.one_plus_weight) wv = hn::Add(one, wv);
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + d), vinv), wv), df, y + d);
    }
    for (; d < D; ++d) {
      float wv = ScalarW(w + d);
      if (a.one_plus_weight) wv = 1.f + wv;
      y[d] = (x[d] * inv) * wv;
    }
  }
}

void NormRows(const NormArgs& a, int64_t r0, int64_t r1) {
  if (a.w_bf16) {
    NormRowsT<uint16_t>(a, r0, r1);
  } else {
    NormRowsT<float>(a, r0, r1);
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

HWY_EXPORT(NormRows);

namespace {

void check_norm(const char* op, const Tensor& x, const Tensor& w, const NormParams& p, const Tensor& y) {
  check_tensor(op, "x", x, 2);
  check_tensor(op, "w", w, 1);
  check_tensor(op, "y", y, 2);
  check_dtype(op, "x", x, {DType::f32});
  check_dtype(op, "w", w, {DType::f32, DType::bf16});
  check_dtype(op, "y", y, {DType::f32});
  check_same_shape(op, "x", x, "y", y);
  check_dim(op, "w", w, 0, x.size(1));
  RILL_ENSURE(std::isfinite(p.eps) && p.eps >= 0.f, "[{}] eps must be finite and >= 0, got {}", op, p.eps);
  // y may be x itself, but not a shifted view of it (rows would be overwritten before they are read).
  RILL_ENSURE(y.data() == x.data() || y.nbytes() == 0 ||
                  reinterpret_cast<uintptr_t>(y.data()) + y.nbytes() <= reinterpret_cast<uintptr_t>(x.data()) ||
                  reinterpret_cast<uintptr_t>(x.data()) + x.nbytes() <= reinterpret_cast<uintptr_t>(y.data()),
              "[{}] y must be x itself or not overlap it", op);
}

void run_norm(const NormArgs& a, int64_t rows) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, a.D));
  ThreadPool::global().parallel_for(rows, grain,
                                    [&](int64_t r0, int64_t r1) { HWY_DYNAMIC_DISPATCH(NormRows)(a, r0, r1); });
}

NormArgs make_args(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) {
  NormArgs a;
  a.x = x.data_as<const float>();
  a.w = w.data();
  a.w_bf16 = w.dtype() == DType::bf16;
  a.one_plus_weight = p.one_plus_weight;
  a.eps = p.eps;
  a.y = y.data_as<float>();
  a.D = x.size(1);
  return a;
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) {
  check_norm("rms_norm", x, w, p, y);
  run_norm(make_args(x, w, p, y), x.size(0));
}

void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) {
  constexpr const char* op = "add_rms_norm";
  check_norm(op, x, w, p, y);
  check_tensor(op, "residual", residual, 2);
  check_dtype(op, "residual", residual, {DType::f32});
  check_same_shape(op, "residual", residual, "x", x);
  check_no_overlap(op, "residual", residual, "x", x);
  check_no_overlap(op, "residual", residual, "y", y);
  NormArgs a = make_args(x, w, p, y);
  a.residual = residual.data_as<float>();
  run_norm(a, x.size(0));
}

}  // namespace rill::cpu
#endif  // HWY_ONCE
