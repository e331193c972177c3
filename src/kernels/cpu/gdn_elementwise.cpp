// kernels/cpu/gdn_elementwise.cpp — the row-wise ops around the Gated DeltaNet recurrence on the
// CPU (f32): L2 norm, gated RMSNorm, the decay/beta gates and the sigmoid output gate. Plain
// scalar loops in f32 with the operation order of the transformers reference.
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace rill::cpu {
namespace {

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
float silu(float x) { return x / (1.f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1, threshold 20.
float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

void check_f32(const char* op, const char* name, const Tensor& t, int rank) {
  check_tensor(op, name, t, rank);
  check_dtype(op, name, t, {DType::f32});
}

}  // namespace

void CpuKernels::l2_norm(const Tensor& x, float eps, float scale, Tensor& y) {
  constexpr const char* op = "l2_norm";
  check_f32(op, "x", x, 2);
  check_f32(op, "y", y, 2);
  check_same_shape(op, "x", x, "y", y);
  const int64_t M = x.size(0), D = x.size(1);
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
  ThreadPool::global().parallel_for(M, 64, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* r = px + m * D;
      float ss = 0.f;
      for (int64_t d = 0; d < D; ++d) ss += r[d] * r[d];
      const float inv = 1.f / std::sqrt(ss + eps);
      for (int64_t d = 0; d < D; ++d) py[m * D + d] = r[d] * inv * scale;
    }
  });
}

void CpuKernels::gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  constexpr const char* op = "gated_rms_norm";
  check_f32(op, "x", x, 2);
  check_f32(op, "z", z, 2);
  check_f32(op, "w", w, 1);
  check_f32(op, "y", y, 2);
  check_same_shape(op, "x", x, "z", z);
  check_same_shape(op, "x", x, "y", y);
  const int64_t M = x.size(0), D = x.size(1);
  check_dim(op, "w", w, 0, D);
  const float *px = x.data_as<float>(), *pz = z.data_as<float>(), *pw = w.data_as<float>();
  float* py = y.data_as<float>();
  ThreadPool::global().parallel_for(M, 64, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* r = px + m * D;
      float ss = 0.f;
      for (int64_t d = 0; d < D; ++d) ss += r[d] * r[d];
      const float inv = 1.f / std::sqrt(ss / float(D) + eps);
      for (int64_t d = 0; d < D; ++d) py[m * D + d] = (r[d] * inv) * pw[d] * silu(pz[m * D + d]);
    }
  });
}

void CpuKernels::gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias, Tensor& g,
                           Tensor& beta) {
  constexpr const char* op = "gdn_gates";
  check_f32(op, "a", a, 2);
  check_f32(op, "b", b, 2);
  check_f32(op, "A_log", a_log, 1);
  check_f32(op, "dt_bias", dt_bias, 1);
  check_f32(op, "g", g, 2);
  check_f32(op, "beta", beta, 2);
  check_same_shape(op, "a", a, "b", b);
  check_same_shape(op, "a", a, "g", g);
  check_same_shape(op, "a", a, "beta", beta);
  const int64_t T = a.size(0), H = a.size(1);
  check_dim(op, "A_log", a_log, 0, H);
  check_dim(op, "dt_bias", dt_bias, 0, H);
  const float *pa = a.data_as<float>(), *pb = b.data_as<float>();
  const float *pl = a_log.data_as<float>(), *pd = dt_bias.data_as<float>();
  float *pg = g.data_as<float>(), *pbeta = beta.data_as<float>();
  for (int64_t i = 0; i < T * H; ++i) {
    const int64_t h = i % H;
    pg[i] = -std::exp(pl[h]) * softplus(pa[i] + pd[h]);
    pbeta[i] = sigmoid(pb[i]);
  }
}

void CpuKernels::sigmoid_mul(const Tensor& x, const Tensor& gate, Tensor& out) {
  constexpr const char* op = "sigmoid_mul";
  check_tensor(op, "x", x, x.ndim());
  check_tensor(op, "gate", gate, gate.ndim());
  check_tensor(op, "out", out, out.ndim());
  check_dtype(op, "x", x, {DType::f32});
  check_dtype(op, "gate", gate, {DType::f32});
  check_dtype(op, "out", out, {DType::f32});
  RILL_ENSURE(x.numel() == gate.numel() && x.numel() == out.numel(),
              "[sigmoid_mul] x {}, gate {}, out {}: element counts differ", x.describe(), gate.describe(),
              out.describe());
  const float *px = x.data_as<float>(), *pg = gate.data_as<float>();
  float* po = out.data_as<float>();
  const int64_t n = x.numel();
  ThreadPool::global().parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) po[i] = px[i] * sigmoid(pg[i]);
  });
}

}  // namespace rill::cpu
