// CPU Gated DeltaNet ops against naive double-precision per-token references: the gated delta
// rule in its recurrent and chunked forms (several chunk sizes, ragged rows, rows that continue
// from a stored state), chunked == recurrent, prefill-then-steps == one call; causal conv1d with
// its rolling state; l2_norm, gated_rms_norm, gdn_gates, sigmoid_mul.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

using test::rel_error;

Tensor host(std::vector<float>& v, std::initializer_list<int64_t> shape) { return Tensor(v.data(), DType::f32, shape); }
Tensor host_i32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::i32, shape);
}

struct Rows {
  std::vector<int32_t> cu{0}, slots, has_state;
  StateBatch batch() {
    StateBatch b;
    b.num_rows = int32_t(slots.size());
    b.cu_seqlens = host_i32(cu, {int64_t(cu.size())});
    b.slots = host_i32(slots, {int64_t(slots.size())});
    b.has_state = host_i32(has_state, {int64_t(has_state.size())});
    return b;
  }
  void add(int32_t len, int32_t slot, bool has) {
    cu.push_back(cu.back() + len);
    slots.push_back(slot);
    has_state.push_back(has ? 1 : 0);
  }
};

struct DeltaCase {
  int64_t Hk = 2, Hv = 4, dk = 16, dv = 8, slots = 4;
  std::vector<float> q, k, v, g, beta, state0;
};

DeltaCase make_case(std::mt19937& rng, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
  DeltaCase c;
  c.Hk = Hk, c.Hv = Hv, c.dk = dk, c.dv = dv;
  c.q = test::random_floats(rng, size_t(T * Hk * dk));
  c.k = test::random_floats(rng, size_t(T * Hk * dk));
  // Unit-norm keys as the model feeds them (keeps the recurrence contractive).
  for (int64_t i = 0; i < T * Hk; ++i) {
    double ss = 0;
    for (int64_t a = 0; a < dk; ++a) ss += double(c.k[size_t(i * dk + a)]) * c.k[size_t(i * dk + a)];
    for (int64_t a = 0; a < dk; ++a) c.k[size_t(i * dk + a)] = float(c.k[size_t(i * dk + a)] / std::sqrt(ss));
  }
  c.v = test::random_floats(rng, size_t(T * Hv * dv), -2.f, 2.f);
  c.g = test::random_floats(rng, size_t(T * Hv), -1.5f, 0.f);
  c.beta = test::random_floats(rng, size_t(T * Hv), 0.f, 1.f);
  c.state0 = test::random_floats(rng, size_t(c.slots * Hv * dk * dv), -1.f, 1.f);
  return c;
}

// Per token in double: S ← e^g S; S += k ⊗ β(v − Sᵀk); o = Sᵀ(scale q).
void reference_delta(const DeltaCase& c, const Rows& rows, float scale, std::vector<double>& out,
                     std::vector<double>& state) {
  state.assign(c.state0.begin(), c.state0.end());
  out.assign(c.v.size(), 0.0);
  const int64_t r = c.Hv / c.Hk;
  for (size_t row = 0; row < rows.slots.size(); ++row) {
    for (int64_t h = 0; h < c.Hv; ++h) {
      double* S = &state[size_t((rows.slots[row] * c.Hv + h) * c.dk * c.dv)];
      if (!rows.has_state[row]) std::fill(S, S + c.dk * c.dv, 0.0);
      for (int64_t t = rows.cu[row]; t < rows.cu[row + 1]; ++t) {
        const float* q = &c.q[size_t((t * c.Hk + h / r) * c.dk)];
        const float* k = &c.k[size_t((t * c.Hk + h / r) * c.dk)];
        const float* v = &c.v[size_t((t * c.Hv + h) * c.dv)];
        const double e = std::exp(double(c.g[size_t(t * c.Hv + h)])), b = c.beta[size_t(t * c.Hv + h)];
        for (int64_t i = 0; i < c.dk * c.dv; ++i) S[i] *= e;
        for (int64_t j = 0; j < c.dv; ++j) {
          double u = 0;
          for (int64_t a = 0; a < c.dk; ++a) u += S[a * c.dv + j] * k[a];
          const double d = b * (v[j] - u);
          for (int64_t a = 0; a < c.dk; ++a) S[a * c.dv + j] += k[a] * d;
        }
        for (int64_t j = 0; j < c.dv; ++j) {
          double o = 0;
          for (int64_t a = 0; a < c.dk; ++a) o += S[a * c.dv + j] * double(q[a]) * scale;
          out[size_t((t * c.Hv + h) * c.dv + j)] = o;
        }
      }
    }
  }
}

struct DeltaResult {
  std::vector<float> out, state;
};

DeltaResult run_delta(Kernels& kern, DeltaCase c, Rows rows, DeltaRuleParams p) {
  const int64_t T = rows.cu.back();
  DeltaResult res;
  res.out.assign(size_t(T * c.Hv * c.dv), 0.f);
  res.state = c.state0;
  Tensor q = host(c.q, {T, c.Hk, c.dk}), k = host(c.k, {T, c.Hk, c.dk}), v = host(c.v, {T, c.Hv, c.dv});
  Tensor g = host(c.g, {T, c.Hv}), beta = host(c.beta, {T, c.Hv});
  Tensor st = host(res.state, {c.slots, c.Hv, c.dk, c.dv}), out = host(res.out, {T, c.Hv, c.dv});
  kern.gated_delta_rule(q, k, v, g, beta, rows.batch(), st, out, p);
  return res;
}

TEST(CpuGatedDelta, RecurrentAndChunkedMatchPerTokenReference) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(301);
  std::mt19937 rng(seed);
  struct Shape {
    int64_t Hk, Hv, dk, dv;
  };
  for (Shape s : {Shape{2, 4, 16, 8}, Shape{1, 1, 8, 24}, Shape{2, 6, 32, 16}}) {
    Rows rows;
    rows.add(1, 2, false);
    rows.add(17, 0, true);
    rows.add(70, 3, false);
    rows.add(130, 1, true);
    DeltaCase c = make_case(rng, rows.cu.back(), s.Hk, s.Hv, s.dk, s.dv);
    std::vector<double> ref_out, ref_state;
    const float scale = 1.f / std::sqrt(float(s.dk));
    reference_delta(c, rows, scale, ref_out, ref_state);
    for (DeltaRuleForm form : {DeltaRuleForm::recurrent, DeltaRuleForm::chunked, DeltaRuleForm::automatic}) {
      for (int32_t chunk : {64, 16, 5}) {
        SCOPED_TRACE(testing::Message() << "seed " << seed << " Hv " << s.Hv << " form " << int(form) << " chunk "
                                        << chunk);
        DeltaRuleParams p;
        p.scale = scale;
        p.form = form;
        p.chunk_size = chunk;
        DeltaResult r = run_delta(*kern, c, rows, p);
        EXPECT_LT(rel_error(r.out, ref_out), 2e-5);
        EXPECT_LT(rel_error(r.state, ref_state), 2e-5);
      }
    }
  }
}

TEST(CpuGatedDelta, ChunkedEqualsRecurrentAndSplitsCompose) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(302);
  std::mt19937 rng(seed);
  const int64_t T = 150;
  Rows whole;
  whole.add(int32_t(T), 1, false);
  DeltaCase c = make_case(rng, T, 2, 4, 16, 16);
  DeltaRuleParams chunked;
  chunked.form = DeltaRuleForm::chunked;
  DeltaRuleParams recurrent;
  recurrent.form = DeltaRuleForm::recurrent;
  DeltaResult a = run_delta(*kern, c, whole, chunked);
  DeltaResult b = run_delta(*kern, c, whole, recurrent);
  std::vector<double> bo(b.out.begin(), b.out.end()), bs(b.state.begin(), b.state.end());
  EXPECT_LT(rel_error(a.out, bo), 1e-5);
  EXPECT_LT(rel_error(a.state, bs), 1e-5);

  // Prefill 100 tokens (chunked), then 3 verification-sized steps of 16/1/33 tokens from the state.
  DeltaResult split;
  split.state = c.state0;
  split.out.assign(a.out.size(), 0.f);
  int64_t done = 0;
  for (int64_t len : {100, 16, 1, 33}) {
    DeltaCase part = c;
    auto take = [&](const std::vector<float>& src, int64_t width) {
      return std::vector<float>(src.begin() + done * width, src.begin() + (done + len) * width);
    };
    part.q = take(c.q, c.Hk * c.dk);
    part.k = take(c.k, c.Hk * c.dk);
    part.v = take(c.v, c.Hv * c.dv);
    part.g = take(c.g, c.Hv);
    part.beta = take(c.beta, c.Hv);
    part.state0 = split.state;
    Rows rows;
    rows.add(int32_t(len), 1, done > 0);
    DeltaRuleParams p;  // automatic: recurrent for ≤ 16 tokens, chunked above
    DeltaResult r = run_delta(*kern, part, rows, p);
    std::copy(r.out.begin(), r.out.end(), split.out.begin() + done * c.Hv * c.dv);
    split.state = r.state;
    done += len;
  }
  std::vector<double> ao(a.out.begin(), a.out.end()), as(a.state.begin(), a.state.end());
  EXPECT_LT(rel_error(split.out, ao), 1e-5);
  EXPECT_LT(rel_error(split.state, as), 1e-5);
}

TEST(CpuGatedDelta, RejectsBadArguments) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(1);
  DeltaCase c = make_case(rng, 4, 2, 3, 8, 8);  // 3 value heads over 2 key heads
  Rows rows;
  rows.add(4, 0, false);
  EXPECT_THROW(run_delta(*kern, c, rows, {}), Error);
  DeltaCase ok = make_case(rng, 4, 2, 4, 8, 8);
  Rows bad_slot;
  bad_slot.add(4, 9, false);
  EXPECT_THROW(run_delta(*kern, ok, bad_slot, {}), Error);
}

std::vector<double> reference_conv(const std::vector<float>& x, const std::vector<float>& w, const Rows& rows,
                                   int64_t C, int64_t K, std::vector<float>& state, bool silu) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < rows.slots.size(); ++r) {
    float* st = &state[size_t(rows.slots[r] * (K - 1) * C)];
    std::vector<double> win;
    const int64_t n = rows.cu[r + 1] - rows.cu[r];
    for (int64_t c = 0; c < C; ++c) {
      win.clear();
      for (int64_t t = 0; t < K - 1; ++t) win.push_back(rows.has_state[r] ? st[t * C + c] : 0.0);
      for (int64_t t = 0; t < n; ++t) win.push_back(x[size_t((rows.cu[r] + t) * C + c)]);
      for (int64_t t = 0; t < n; ++t) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(w[size_t(c * K + k)]) * win[size_t(t + k)];
        y[size_t((rows.cu[r] + t) * C + c)] = silu ? acc / (1 + std::exp(-acc)) : acc;
      }
      for (int64_t t = 0; t < K - 1; ++t) st[t * C + c] = float(win[size_t(n + t)]);
    }
  }
  return y;
}

TEST(CpuConv1d, MatchesReferenceWithRollingState) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(303);
  std::mt19937 rng(seed);
  for (int64_t K : {4, 2, 1}) {
    for (bool silu : {true, false}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " K " << K << " silu " << silu);
      const int64_t C = 130, slots = 5;
      Rows rows;
      rows.add(1, 4, true);
      rows.add(2, 0, false);
      rows.add(9, 2, true);
      rows.add(1, 1, false);
      const int64_t T = rows.cu.back();
      std::vector<float> x = test::random_floats(rng, size_t(T * C), -2.f, 2.f);
      std::vector<float> w = test::random_floats(rng, size_t(C * K));
      std::vector<float> state = test::random_floats(rng, size_t(slots * (K - 1) * C));
      std::vector<float> ref_state = state;
      std::vector<double> ref = reference_conv(x, w, rows, C, K, ref_state, silu);
      std::vector<float> y(x.size());
      Tensor st = host(state, {slots, K - 1, C}), out = host(y, {T, C});
      kern->causal_conv1d(host(x, {T, C}), host(w, {C, K}), rows.batch(), st, out, silu);
      EXPECT_LT(rel_error(y, ref), 1e-6);
      EXPECT_EQ(state, ref_state);
    }
  }
}

TEST(CpuConv1d, PrefillThenDecodeEqualsOneCall) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(304));
  const int64_t C = 40, K = 4, T = 11;
  std::vector<float> x = test::random_floats(rng, size_t(T * C)), w = test::random_floats(rng, size_t(C * K));
  std::vector<float> s1(size_t((K - 1) * C)), s2 = s1, y1(size_t(T * C)), y2(size_t(T * C));
  Rows whole;
  whole.add(int32_t(T), 0, false);
  Tensor st1 = host(s1, {1, K - 1, C}), o1 = host(y1, {T, C});
  kern->causal_conv1d(host(x, {T, C}), host(w, {C, K}), whole.batch(), st1, o1, true);
  int64_t done = 0;
  for (int64_t len : {2, 1, 1, 7}) {
    Rows rows;
    rows.add(int32_t(len), 0, done > 0);
    Tensor xs(x.data() + done * C, DType::f32, {len, C}), ys(y2.data() + done * C, DType::f32, {len, C});
    Tensor st2 = host(s2, {1, K - 1, C});
    kern->causal_conv1d(xs, host(w, {C, K}), rows.batch(), st2, ys, true);
    done += len;
  }
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(s1, s2);
}

TEST(CpuGdnElementwise, NormsGatesAndSigmoidMatchReference) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(305));
  const int64_t M = 9, D = 37;
  std::vector<float> x = test::random_floats(rng, size_t(M * D), -3.f, 3.f), z = test::random_floats(rng, size_t(M * D), -4.f, 4.f);
  std::vector<float> w = test::random_floats(rng, size_t(D), 0.5f, 1.5f), y(x.size());
  std::vector<double> ref(x.size());
  // l2_norm with a scale
  Tensor yl = host(y, {M, D});
  kern->l2_norm(host(x, {M, D}), 1e-6f, 0.25f, yl);
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[size_t(m * D + d)]) * x[size_t(m * D + d)];
    for (int64_t d = 0; d < D; ++d) ref[size_t(m * D + d)] = x[size_t(m * D + d)] / std::sqrt(ss + 1e-6) * 0.25;
  }
  EXPECT_LT(rel_error(y, ref), 1e-6);
  // gated_rms_norm
  Tensor yt = host(y, {M, D});
  kern->gated_rms_norm(host(x, {M, D}), host(z, {M, D}), host(w, {D}), 1e-6f, yt);
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[size_t(m * D + d)]) * x[size_t(m * D + d)];
    const double inv = 1 / std::sqrt(ss / double(D) + 1e-6);
    for (int64_t d = 0; d < D; ++d) {
      const double zz = z[size_t(m * D + d)];
      ref[size_t(m * D + d)] = x[size_t(m * D + d)] * inv * w[size_t(d)] * zz / (1 + std::exp(-zz));
    }
  }
  EXPECT_LT(rel_error(y, ref), 1e-6);
  // sigmoid_mul
  kern->sigmoid_mul(host(x, {M, D}), host(z, {M, D}), yt);
  for (size_t i = 0; i < x.size(); ++i) ref[i] = x[i] / (1 + std::exp(-double(z[i])));
  EXPECT_LT(rel_error(y, ref), 1e-6);
  // gdn_gates, including the softplus linear region (> 20)
  const int64_t T = 5, H = 4;
  std::vector<float> a = test::random_floats(rng, size_t(T * H), -8.f, 8.f), b = test::random_floats(rng, size_t(T * H), -8.f, 8.f);
  a[3] = 25.f;
  std::vector<float> alog = test::random_floats(rng, size_t(H), 0.f, 2.7f), dt = test::random_floats(rng, size_t(H));
  std::vector<float> g(size_t(T * H)), beta(size_t(T * H));
  std::vector<double> rg(g.size()), rb(g.size());
  Tensor gt = host(g, {T, H}), bt = host(beta, {T, H});
  kern->gdn_gates(host(a, {T, H}), host(b, {T, H}), host(alog, {H}), host(dt, {H}), gt, bt);
  for (int64_t i = 0; i < T * H; ++i) {
    const double s = double(a[size_t(i)]) + dt[size_t(i % H)];
    rg[size_t(i)] = -std::exp(double(alog[size_t(i % H)])) * (s > 20 ? s : std::log1p(std::exp(s)));
    rb[size_t(i)] = 1 / (1 + std::exp(-double(b[size_t(i)])));
  }
  EXPECT_LT(rel_error(g, rg), 1e-6);
  EXPECT_LT(rel_error(beta, rb), 1e-6);
}

}  // namespace
}  // namespace rill
