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
#include "kernels/cpu/simd-inl.h"

#include <cmath>
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
// k block of every dot product (a multiple of every target's lane count): a tile's rows of x
// (6 x 4 KiB) stay in L1 while it sweeps a panel.
constexpr int64_t kKBlock = 1024;
// Panel rows are padded by one cache line so rows 4 KiB apart do not share L1 sets.
constexpr int64_t kPanelPad = 16;
}  // namespace rill::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace rill::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Prefill tile: kTileM rows of x by kTileN weight rows of accumulators. AVX-512 has 32 registers:
// 6x4 (24 accumulators, 10 loads per 24 FMAs); AVX2 and SSE4 have 16: 3x4.
#if HWY_TARGET <= HWY_AVX3
constexpr int kTileM = 6;
#else
constexpr int kTileM = 3;
#endif
constexpr int kTileN = 4;

HWY_INLINE float BiasAt(const MatmulArgs& a, int64_t n) {
  if (a.bias == nullptr) return 0.f;
  return a.bias_bf16 ? ScalarW(static_cast<const uint16_t*>(a.bias) + n) : static_cast<const float*>(a.bias)[n];
}

// One k block [k0, k0 + count) of the MR x NR outputs y[i, j] (row stride N): x row i at
// x + i * K and w row j at w + j * ldw, both already offset to k0. The first block stores its lane
// sums, later blocks add theirs to y; the last adds the scalar tail (count % lanes, only the last
// block has one since kKBlock is a multiple of every lane count) and the bias. Every path runs the
// same blocks in the same order, which is what makes the result independent of M.
template <int MR, int NR, typename W>
HWY_INLINE void TileBlock(const MatmulArgs& a, const float* HWY_RESTRICT x, const W* HWY_RESTRICT w, int64_t ldw,
                          int64_t count, bool first, bool last, int64_t n, float* HWY_RESTRICT y) {
  const DF df;
  const int64_t K = a.K;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const int64_t k_vec = count - count % lanes;
  VF acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = hn::Zero(df);
  for (int64_t k = 0; k < k_vec; k += lanes) {
    VF xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = hn::LoadU(df, x + i * K + k);
    for (int j = 0; j < NR; ++j) {
      const VF wv = LoadW(df, w + j * ldw + k);
      for (int i = 0; i < MR; ++i) acc[i][j] = hn::MulAdd(xv[i], wv, acc[i][j]);
    }
  }
  // Lane sums four at a time (one shared shuffle tree); unused slots of a group sum zeros.
  float sums[MR * NR + 3];
  for (int g = 0; g < MR * NR; g += 4) {
    VF v[4];
    for (int e = 0; e < 4; ++e) v[e] = g + e < MR * NR ? acc[(g + e) / NR][(g + e) % NR] : hn::Zero(df);
    SumOfLanes4(df, v[0], v[1], v[2], v[3], sums + g);
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = sums[i * NR + j];
      if (!first) s = y[i * a.N + j] + s;
      if (last) {
        // An explicit fused multiply-add: written as s += x * w, the compiler contracted it on FMA
        // targets in some tile shapes and not in others, and a row's bits followed the batch.
        for (int64_t k = k_vec; k < count; ++k) s = std::fma(x[i * K + k], ScalarW(w + j * ldw + k), s);
        s += BiasAt(a, n + j);
      }
      y[i * a.N + j] = s;
    }
  }
}

// Block [k0, k0 + count) of outputs y[m .. m+MR, n0 .. n1); w row n at w + (n - n0) * ldw (offset to k0).
template <int MR, int NR, typename W>
HWY_INLINE void TileRowBlock(const MatmulArgs& a, int64_t m, const W* w, int64_t ldw, int64_t n0, int64_t n1,
                             int64_t k0, int64_t count) {
  const float* x = a.x + m * a.K + k0;
  float* y = a.y + m * a.N;
  const bool first = k0 == 0, last = k0 + count == a.K;
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) TileBlock<MR, NR>(a, x, w + (n - n0) * ldw, ldw, count, first, last, n, y + n);
  for (; n < n1; ++n) TileBlock<MR, 1>(a, x, w + (n - n0) * ldw, ldw, count, first, last, n, y + n);
}

// Streams each weight row once: for each group of NR rows, all k blocks, all M (<= 4) rows of x.
template <int MR, int NR, typename W>
HWY_INLINE void MatvecRows(const MatmulArgs& a, int64_t n0, int64_t n1) {
  const W* w = static_cast<const W*>(a.w);
  for (int64_t n = n0; n < n1; n += NR) {
    const int64_t n_end = n + NR < n1 ? n + NR : n1;
    for (int64_t k0 = 0; k0 < a.K || k0 == 0; k0 += kKBlock) {
      const int64_t count = a.K - k0 < kKBlock ? a.K - k0 : kKBlock;
      TileRowBlock<MR, NR>(a, 0, w + n * a.K + k0, a.K, n, n_end, k0, count);
    }
  }
}

template <typename W>
void MatvecRangeT(const MatmulArgs& a, int64_t n0, int64_t n1) {
  switch (a.M) {
    case 1: MatvecRows<1, 8, W>(a, n0, n1); break;
    case 2: MatvecRows<2, 4, W>(a, n0, n1); break;
    case 3: MatvecRows<3, 4, W>(a, n0, n1); break;
    case 4: MatvecRows<4, 4, W>(a, n0, n1); break;
    default: break;  // the caller routes larger M to MatmulPanel
  }
}

// Rows n0 .. n1 of w against every row of x, one k block at a time: a bf16 block of the panel is
// converted into `panel` ((n1 - n0) * kKBlock floats) once and stays in L2 while all rows of x
// pass over it; each x tile's k block (4 rows) stays in L1 across the panel.
template <typename W>
void MatmulPanelT(const MatmulArgs& a, int64_t n0, int64_t n1, float* HWY_RESTRICT panel) {
  const int64_t K = a.K;
  for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kKBlock) {
    const int64_t count = K - k0 < kKBlock ? K - k0 : kKBlock;
    const float* wp = nullptr;
    int64_t ldw = K;
    if constexpr (sizeof(W) == 2) {
      const DF df;
      const int64_t lanes = int64_t(hn::Lanes(df));
      for (int64_t r = 0; r < n1 - n0; ++r) {
        const W* src = static_cast<const W*>(a.w) + (n0 + r) * K + k0;
        float* dst = panel + r * (count + kPanelPad);
        int64_t i = 0;
        for (; i + lanes <= count; i += lanes) hn::StoreU(LoadW(df, src + i), df, dst + i);
        for (; i < count; ++i) dst[i] = ScalarW(src + i);
      }
      wp = panel;
      ldw = count + kPanelPad;
    } else {
      wp = static_cast<const float*>(a.w) + n0 * K + k0;
    }
    int64_t m = 0;
    for (; m + kTileM <= a.M; m += kTileM) TileRowBlock<kTileM, kTileN>(a, m, wp, ldw, n0, n1, k0, count);
    switch (a.M - m) {
      case 1: TileRowBlock<1, kTileN>(a, m, wp, ldw, n0, n1, k0, count); break;
      case 2: TileRowBlock<2, kTileN>(a, m, wp, ldw, n0, n1, k0, count); break;
      case 3: TileRowBlock<3, kTileN>(a, m, wp, ldw, n0, n1, k0, count); break;
      case 4: TileRowBlock<4, kTileN>(a, m, wp, ldw, n0, n1, k0, count); break;
      case 5: TileRowBlock<5, kTileN>(a, m, wp, ldw, n0, n1, k0, count); break;
      default: break;
    }
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
  // A panel of 64 weight rows x one k block (256 KiB in f32) stays in L2 while all of x streams past it.
  const int64_t rows = 64;
  const int64_t num_panels = (N + rows - 1) / rows;
  pool.parallel_for(num_panels, 1, [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> panel;
    const size_t panel_floats = size_t(rows * (std::min(K, kKBlock) + kPanelPad));
    if (a.w_bf16 && panel.size() < panel_floats) panel.resize(panel_floats);
    for (int64_t p = p0; p < p1; ++p) {
      HWY_DYNAMIC_DISPATCH(MatmulPanel)(a, p * rows, std::min(N, (p + 1) * rows), panel.data());
    }
  });
}

}  // namespace rill::cpu
#endif  // HWY_ONCE
