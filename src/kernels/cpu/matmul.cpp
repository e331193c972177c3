// kernels/cpu/matmul.cpp — y[M,N] = x[M,K]·w[N,K]ᵀ (+ bias[N]); f32 x, f32 or bf16 w; Highway dispatch.
// Invariant: every output is one dot product summed the same way on every path (lane-wise FMA over
// k in whole vectors, a sum of the lanes, the scalar tail in k order, then + bias), so a row's
// result never depends on how many rows share the call. Small M streams each weight row once
// (decode, parallel over N); larger M converts a panel of weight rows to f32 once and reuses it
// from cache for every row of x (prefill).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>

#include "core/dtype.h"

#ifndef RILL_KERNELS_CPU_MATMUL_ARGS
#define RILL_KERNELS_CPU_MATMUL_ARGS
namespace rill::cpu {
struct MatmulArgs {
  const float* x = nullptr;  // [M, K]
  const void* w = nullptr;   // [N, K], f32 or bf16 bits
  bool w_bf16 = false;
  const void* bias = nullptr;  // [N] or null
  bool bias_bf16 = false;
  float* y = nullptr;  // [M, N]
  int64_t M = 0, N = 0, K = 0;
};
// Rows of x handled by the streaming path: up to this many, w is read once straight from memory.
constexpr int64_t kMatvecMaxRows = 4;
}  // namespace rill::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace rill::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

HWY_INLINE VF LoadW(DF df, const float* HWY_RESTRICT p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadW(DF df, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}
HWY_INLINE float ScalarW(const float* p) { return *p; }
HWY_INLINE float ScalarW(const uint16_t* p) { return bits_to_f32(uint32_t(*p) << 16); }

HWY_INLINE float BiasAt(const MatmulArgs& a, int64_t n) {
  if (a.bias == nullptr) return 0.f;
  return a.bias_bf16 ? ScalarW(static_cast<const uint16_t*>(a.bias) + n) : static_cast<const float*>(a.bias)[n];
}

// y[i, j] for MR rows of x (row stride K) and NR rows of w (row stride K), i < MR, j < NR.
template <int MR, int NR, typename W>
HWY_INLINE void Tile(const MatmulArgs& a, const float* HWY_RESTRICT x, const W* HWY_RESTRICT w, int64_t n,
                     float* HWY_RESTRICT y) {
  const DF df;
  const int64_t K = a.K;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const int64_t k_vec = K - K % lanes;
  VF acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = hn::Zero(df);
  for (int64_t k = 0; k < k_vec; k += lanes) {
    VF xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = hn::LoadU(df, x + i * K + k);
    for (int j = 0; j < NR; ++j) {
      const VF wv = LoadW(df, w + j * K + k);
      for (int i = 0; i < MR; ++i) acc[i][j] = hn::MulAdd(xv[i], wv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[i][j]));
      for (int64_t k = k_vec; k < K; ++k) s += x[i * K + k] * ScalarW(w + j * K + k);
      y[i * a.N + j] = s + BiasAt(a, n + j);
    }
  }
}

// Outputs y[m .. m+MR, n0 .. n1) with w rows taken from `w` (row n at w + (n - n0) * K).
template <int MR, int NR, typename W>
HWY_INLINE void TileRow(const MatmulArgs& a, int64_t m, const W* w, int64_t n0, int64_t n1) {
  const float* x = a.x + m * a.K;
  float* y = a.y + m * a.N;
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) Tile<MR, NR>(a, x, w + (n - n0) * a.K, n, y + n);
  for (; n < n1; ++n) Tile<MR, 1>(a, x, w + (n - n0) * a.K, n, y + n);
}

template <typename W>
void MatvecRangeT(const MatmulArgs& a, int64_t n0, int64_t n1) {
  const W* w = static_cast<const W*>(a.w) + n0 * a.K;
  switch (a.M) {
    case 1: TileRow<1, 8>(a, 0, w, n0, n1); break;
    case 2: TileRow<2, 4>(a, 0, w, n0, n1); break;
    case 3: TileRow<3, 4>(a, 0, w, n0, n1); break;
    case 4: TileRow<4, 4>(a, 0, w, n0, n1); break;
    default: break;  // the caller routes larger M to MatmulPanel
  }
}

// Rows n0 .. n1 of w against every row of x. A bf16 panel is converted into `panel`
// ((n1 - n0) * K floats) once, then stays in L2 while all rows of x stream past it.
template <typename W>
void MatmulPanelT(const MatmulArgs& a, int64_t n0, int64_t n1, float* HWY_RESTRICT panel) {
  const int64_t K = a.K;
  const float* wp = nullptr;
  if constexpr (sizeof(W) == 2) {
    const DF df;
    const int64_t lanes = int64_t(hn::Lanes(df));
    const W* src = static_cast<const W*>(a.w) + n0 * K;
    const int64_t count = (n1 - n0) * K;
    int64_t i = 0;
    for (; i + lanes <= count; i += lanes) hn::StoreU(LoadW(df, src + i), df, panel + i);
    for (; i < count; ++i) panel[i] = ScalarW(src + i);
    wp = panel;
  } else {
    wp = static_cast<const float*>(a.w) + n0 * K;
  }
  int64_t m = 0;
  for (; m + 4 <= a.M; m += 4) TileRow<4, 4>(a, m, wp, n0, n1);
  switch (a.M - m) {
    case 1: TileRow<1, 4>(a, m, wp, n0, n1); break;
    case 2: TileRow<2, 4>(a, m, wp, n0, n1); break;
    case 3: TileRow<3, 4>(a, m, wp, n0, n1); break;
    default: break;
  }
}

void MatvecRange(const MatmulArgs& a, int64_t n0, int64_t n1) {
  if (a.w_bf16) {
    MatvecRangeT<uint16_t>(a, n0, n1);
  } else {
    MatvecRangeT<float>(a, n0, n1);
  }
}

void MatmulPanel(const MatmulArgs& a, int64_t n0, int64_t n1, float* panel) {
  if (a.w_bf16) {
    MatmulPanelT<uint16_t>(a, n0, n1, panel);
  } else {
    MatmulPanelT<float>(a, n0, n1, panel);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace rill::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/ops.h"

namespace rill::cpu {

HWY_EXPORT(MatvecRange);
HWY_EXPORT(MatmulPanel);

void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  constexpr const char* op = "matmul";
  check_tensor(op, "x", x, 2);
  check_tensor(op, "w", w, 2);
  check_tensor(op, "y", y, 2);
  check_dtype(op, "x", x, {DType::f32});
  check_dtype(op, "w", w, {DType::f32, DType::bf16});
  check_dtype(op, "y", y, {DType::f32});
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  RILL_ENSURE(w.size(1) == K, "[matmul] w: expected [N, {}] to match x {}, got {}", K, x.describe(), w.describe());
  RILL_ENSURE(y.size(0) == M && y.size(1) == N, "[matmul] y: expected [{}, {}], got {}", M, N, y.describe());
  if (bias) {
    check_tensor(op, "bias", *bias, 1);
    check_dtype(op, "bias", *bias, {DType::f32, DType::bf16});
    check_dim(op, "bias", *bias, 0, N);
  }
  check_no_overlap(op, "y", y, "x", x);
  check_no_overlap(op, "y", y, "w", w);
  if (M == 0 || N == 0) return;

  MatmulArgs a;
  a.x = x.data_as<const float>();
  a.w = w.data();
  a.w_bf16 = w.dtype() == DType::bf16;
  a.bias = bias ? bias->data() : nullptr;
  a.bias_bf16 = bias && bias->dtype() == DType::bf16;
  a.y = y.data_as<float>();
  a.M = M;
  a.N = N;
  a.K = K;

  ThreadPool& pool = ThreadPool::global();
  if (M <= kMatvecMaxRows) {
    // Memory-bound: chunks of ~64K weights keep the fan-out cost small next to the streaming.
    const int64_t grain = std::max<int64_t>(8, (int64_t(1) << 16) / std::max<int64_t>(1, K * M));
    pool.parallel_for(N, grain, [&](int64_t n0, int64_t n1) { HWY_DYNAMIC_DISPATCH(MatvecRange)(a, n0, n1); });
    return;
  }
  // A panel of `rows` f32 weight rows (≤ 256 KiB) stays in L2 while all of x streams past it.
  const int64_t rows = std::clamp<int64_t>((int64_t(256) << 10) / (4 * std::max<int64_t>(1, K)) / 4 * 4, 4, 64);
  const int64_t num_panels = (N + rows - 1) / rows;
  pool.parallel_for(num_panels, 1, [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> panel;
    if (a.w_bf16 && panel.size() < size_t(rows * K)) panel.resize(size_t(rows * K));
    for (int64_t p = p0; p < p1; ++p) {
      HWY_DYNAMIC_DISPATCH(MatmulPanel)(a, p * rows, std::min(N, (p + 1) * rows), panel.data());
    }
  });
}

}  // namespace rill::cpu
#endif  // HWY_ONCE
