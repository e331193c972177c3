// kernels/cpu/gated_delta.cpp — the gated delta rule (Gated DeltaNet's recurrence) on the CPU in
// f32, per (row, value head), state S [dk, dv] in f32 (docs/models/qwen3_5.md, GDN section).
// Recurrent form, token by token:  S ← e^g·S;  u = Sᵀk;  S += k ⊗ β(v − u);  o = Sᵀ(scale·q).
// Chunked form (chunks of C tokens, same result to rounding), with γ the in-chunk cumsum of g:
//   A[i,j] = β_i (k_i·k_j) e^{γ_i−γ_j} (j < i);  U = (I+A)⁻¹(β⊙V);  W = (I+A)⁻¹(β e^γ ⊙ K)
//   Vn = U − W·S;  O_i = e^{γ_i} q_i·S + Σ_{j≤i} (q_i·k_j) e^{γ_i−γ_j} Vn_j;  S ← e^{γ_C} S + Σ_j e^{γ_C−γ_j} k_j ⊗ Vn_j
// The unit lower-triangular inverse is applied by forward substitution.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/state_rows.h"

namespace rill::cpu {
namespace {

struct Dims {
  int64_t Hk, Hv, dk, dv;
};

struct Inputs {
  const float *q, *k, *v, *g, *beta;
  float* out;
  float scale;
};

// Tokens [t0, t1) of one value head h, state S [dk, dv] updated in place.
void recurrent(const Inputs& in, const Dims& d, int64_t h, int64_t t0, int64_t t1, float* S) {
  const int64_t kh = h / (d.Hv / d.Hk);
  std::vector<float> u(size_t(d.dv));
  for (int64_t t = t0; t < t1; ++t) {
    const float* q = in.q + (t * d.Hk + kh) * d.dk;
    const float* k = in.k + (t * d.Hk + kh) * d.dk;
    const float* v = in.v + (t * d.Hv + h) * d.dv;
    const float decay = std::exp(in.g[t * d.Hv + h]), b = in.beta[t * d.Hv + h];
    for (int64_t i = 0; i < d.dk * d.dv; ++i) S[i] *= decay;
    std::fill(u.begin(), u.end(), 0.f);
    for (int64_t a = 0; a < d.dk; ++a)
      for (int64_t j = 0; j < d.dv; ++j) u[size_t(j)] += S[a * d.dv + j] * k[a];
    for (int64_t j = 0; j < d.dv; ++j) u[size_t(j)] = b * (v[j] - u[size_t(j)]);
    for (int64_t a = 0; a < d.dk; ++a)
      for (int64_t j = 0; j < d.dv; ++j) S[a * d.dv + j] += k[a] * u[size_t(j)];
    float* o = in.out + (t * d.Hv + h) * d.dv;
    for (int64_t j = 0; j < d.dv; ++j) o[j] = 0.f;
    for (int64_t a = 0; a < d.dk; ++a) {
      const float qa = q[a] * in.scale;
      for (int64_t j = 0; j < d.dv; ++j) o[j] += S[a * d.dv + j] * qa;
    }
  }
}

void chunked(const Inputs& in, const Dims& d, int64_t h, int64_t t0, int64_t t1, int64_t C, float* S) {
  const int64_t kh = h / (d.Hv / d.Hk), dk = d.dk, dv = d.dv;
  // γ is accumulated in double: over a chunk of strongly decaying tokens it reaches thousands, where an
  // f32 sum would put ~1e-4 absolute error into every e^{γ_i−γ_j}.
  std::vector<double> gam(static_cast<size_t>(C));
  std::vector<float> A(static_cast<size_t>(C * C)), U(static_cast<size_t>(C * dv)),
      W(static_cast<size_t>(C * dk)), qs(static_cast<size_t>(C * dk));
  for (int64_t c0 = t0; c0 < t1; c0 += C) {
    const int64_t n = std::min(C, t1 - c0);
    auto q = [&](int64_t i) { return in.q + ((c0 + i) * d.Hk + kh) * dk; };
    auto k = [&](int64_t i) { return in.k + ((c0 + i) * d.Hk + kh) * dk; };
    auto v = [&](int64_t i) { return in.v + ((c0 + i) * d.Hv + h) * dv; };
    auto beta = [&](int64_t i) { return in.beta[(c0 + i) * d.Hv + h]; };
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) gam[size_t(i)] = acc += double(in.g[(c0 + i) * d.Hv + h]);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t a = 0; a < dk; ++a) qs[size_t(i * dk + a)] = q(i)[a] * in.scale;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) {
        float dot = 0.f;
        for (int64_t a = 0; a < dk; ++a) dot += k(i)[a] * k(j)[a];
        A[size_t(i * C + j)] = beta(i) * dot * float(std::exp(gam[size_t(i)] - gam[size_t(j)]));
      }
    // Forward substitution: U_i = β_i v_i − Σ_{j<i} A_ij U_j;  W_i = β_i e^{γ_i} k_i − Σ_{j<i} A_ij W_j.
    for (int64_t i = 0; i < n; ++i) {
      float* Ui = &U[size_t(i * dv)];
      float* Wi = &W[size_t(i * dk)];
      const float eg = float(std::exp(gam[size_t(i)]));
      for (int64_t j = 0; j < dv; ++j) Ui[j] = beta(i) * v(i)[j];
      for (int64_t a = 0; a < dk; ++a) Wi[a] = beta(i) * eg * k(i)[a];
      for (int64_t j = 0; j < i; ++j) {
        const float aij = A[size_t(i * C + j)];
        for (int64_t x = 0; x < dv; ++x) Ui[x] -= aij * U[size_t(j * dv + x)];
        for (int64_t x = 0; x < dk; ++x) Wi[x] -= aij * W[size_t(j * dk + x)];
      }
    }
    // Vn = U − W·S (in place in U); O_i = e^{γ_i} q_i·S (from the incoming state) + intra-chunk part.
    for (int64_t i = 0; i < n; ++i) {
      float* Ui = &U[size_t(i * dv)];
      float* o = in.out + ((c0 + i) * d.Hv + h) * dv;
      const float eg = float(std::exp(gam[size_t(i)]));
      for (int64_t j = 0; j < dv; ++j) o[j] = 0.f;
      for (int64_t a = 0; a < dk; ++a) {
        const float wa = W[size_t(i * dk + a)], qa = qs[size_t(i * dk + a)] * eg;
        const float* Sa = S + a * dv;
        for (int64_t j = 0; j < dv; ++j) {
          Ui[j] -= wa * Sa[j];
          o[j] += qa * Sa[j];
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      float* o = in.out + ((c0 + i) * d.Hv + h) * dv;
      for (int64_t j = 0; j <= i; ++j) {
        float dot = 0.f;
        for (int64_t a = 0; a < dk; ++a) dot += qs[size_t(i * dk + a)] * k(j)[a];
        const float c = dot * float(std::exp(gam[size_t(i)] - gam[size_t(j)]));
        const float* Vj = &U[size_t(j * dv)];
        for (int64_t x = 0; x < dv; ++x) o[x] += c * Vj[x];
      }
    }
    const double glast = gam[size_t(n - 1)];
    const float elast = float(std::exp(glast));
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= elast;
    for (int64_t j = 0; j < n; ++j) {
      const float e = float(std::exp(glast - gam[size_t(j)]));
      const float* Vj = &U[size_t(j * dv)];
      for (int64_t a = 0; a < dk; ++a) {
        const float ka = e * k(j)[a];
        float* Sa = S + a * dv;
        for (int64_t x = 0; x < dv; ++x) Sa[x] += ka * Vj[x];
      }
    }
  }
}

}  // namespace

void CpuKernels::gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                  const Tensor& beta, const StateBatch& batch, Tensor& state, Tensor& out,
                                  const DeltaRuleParams& p) {
  constexpr const char* op = "gated_delta_rule";
  check_tensor(op, "q", q, 3);
  check_tensor(op, "k", k, 3);
  check_tensor(op, "v", v, 3);
  check_tensor(op, "g", g, 2);
  check_tensor(op, "beta", beta, 2);
  check_tensor(op, "state", state, 4);
  check_tensor(op, "out", out, 3);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &g, &beta, &state, &out}) check_dtype(op, "tensor", *t, {DType::f32});
  check_same_shape(op, "q", q, "k", k);
  check_same_shape(op, "v", v, "out", out);
  const int64_t T = q.size(0);
  const Dims d{q.size(1), v.size(1), q.size(2), v.size(2)};
  check_dim(op, "v", v, 0, T);
  RILL_ENSURE(d.Hk > 0 && d.Hv % d.Hk == 0, "[gated_delta_rule] v: {} value heads is not a multiple of {} key heads",
              d.Hv, d.Hk);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&g, &beta}) {
    check_dim(op, "g/beta", *t, 0, T);
    check_dim(op, "g/beta", *t, 1, d.Hv);
  }
  check_dim(op, "state", state, 1, d.Hv);
  check_dim(op, "state", state, 2, d.dk);
  check_dim(op, "state", state, 3, d.dv);
  RILL_ENSURE(p.chunk_size > 0, "[gated_delta_rule] chunk_size must be positive, got {}", p.chunk_size);
  check_no_overlap(op, "v", v, "out", out);
  const std::vector<StateRow> rows = state_rows(op, batch, T, state.size(0));
  const Inputs in{q.data_as<float>(), k.data_as<float>(), v.data_as<float>(), g.data_as<float>(),
                  beta.data_as<float>(), out.data_as<float>(), p.scale};
  float* ps = state.data_as<float>();
  const int64_t n_units = int64_t(rows.size()) * d.Hv;
  ThreadPool::global().parallel_for(n_units, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const StateRow& r = rows[size_t(u / d.Hv)];
      const int64_t h = u % d.Hv;
      float* S = ps + (r.slot * d.Hv + h) * d.dk * d.dv;
      if (!r.has_state) std::fill(S, S + d.dk * d.dv, 0.f);
      const int64_t n = r.end - r.begin;
      const bool use_chunked = p.form == DeltaRuleForm::chunked || (p.form == DeltaRuleForm::automatic && n > 16);
      if (use_chunked) {
        chunked(in, d, h, r.begin, r.end, p.chunk_size, S);
      } else {
        recurrent(in, d, h, r.begin, r.end, S);
      }
    }
  });
}

}  // namespace rill::cpu
