// kernels/cpu/conv1d.cpp — depthwise causal conv1d over time with a rolling per-row state (f32),
// the short convolution of Gated DeltaNet layers. Prefill and decode are the same loop: the
// row's window is [state (K-1 inputs) ‖ new inputs]; afterwards the state holds the last K-1
// inputs of that window (zeros in front when the row has seen fewer).
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/state_rows.h"

namespace rill::cpu {

void CpuKernels::causal_conv1d(const Tensor& x, const Tensor& w, const StateBatch& batch, Tensor& conv_state,
                               Tensor& y, bool silu) {
  constexpr const char* op = "causal_conv1d";
  check_tensor(op, "x", x, 2);
  check_tensor(op, "w", w, 2);
  check_tensor(op, "conv_state", conv_state, 3);
  check_tensor(op, "y", y, 2);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &w, &conv_state, &y}) check_dtype(op, "tensor", *t, {DType::f32});
  check_same_shape(op, "x", x, "y", y);
  check_no_overlap(op, "x", x, "y", y);
  const int64_t T = x.size(0), C = x.size(1), K = w.size(1);
  RILL_ENSURE(K >= 1, "[causal_conv1d] w: kernel width must be ≥ 1, got {}", w.describe());
  check_dim(op, "w", w, 0, C);
  check_dim(op, "conv_state", conv_state, 1, K - 1);
  check_dim(op, "conv_state", conv_state, 2, C);
  const std::vector<StateRow> rows = state_rows(op, batch, T, conv_state.size(0));
  const float *px = x.data_as<float>(), *pw = w.data_as<float>();
  float *ps = conv_state.data_as<float>(), *py = y.data_as<float>();
  const int64_t S = K - 1;
  // Parallel over (row, channel block): channels are independent.
  const int64_t cb = 64, nblocks = (C + cb - 1) / cb;
  ThreadPool::global().parallel_for(int64_t(rows.size()) * nblocks, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> window;
    for (int64_t i = i0; i < i1; ++i) {
      const StateRow& r = rows[size_t(i / nblocks)];
      const int64_t c0 = (i % nblocks) * cb, c1 = std::min(C, c0 + cb), n = r.end - r.begin;
      float* st = ps + r.slot * S * C;
      window.assign(size_t((S + n) * cb), 0.f);
      auto win = [&](int64_t t, int64_t c) -> float& { return window[size_t(t * cb + (c - c0))]; };
      for (int64_t t = 0; t < S; ++t)
        for (int64_t c = c0; c < c1; ++c) win(t, c) = r.has_state ? st[t * C + c] : 0.f;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = c0; c < c1; ++c) win(S + t, c) = px[(r.begin + t) * C + c];
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = c0; c < c1; ++c) {
          float acc = 0.f;
          for (int64_t k = 0; k < K; ++k) acc += pw[c * K + k] * win(t + k, c);
          py[(r.begin + t) * C + c] = silu ? acc / (1.f + std::exp(-acc)) : acc;
        }
      }
      for (int64_t t = 0; t < S; ++t)
        for (int64_t c = c0; c < c1; ++c) st[t * C + c] = win(n + t, c);
    }
  });
}

}  // namespace rill::cpu
