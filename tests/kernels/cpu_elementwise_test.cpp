// CPU swiglu, add, embedding, gather_rows and convert against double references or brute-force
// oracles (the nearest bf16/f16 found by searching neighbours), plus argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

using test::rel_error;

TEST(CpuElementwise, SwigluMatchesReference) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(40);
  std::mt19937 rng(seed);
  for (int64_t M : {1, 3, 17}) {
    for (int64_t I : {1, 7, 130, 3072}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " M " << M << " I " << I);
      std::vector<float> x = test::random_floats(rng, size_t(M * 2 * I), -8.f, 8.f);
      // Saturated gates: exp(-g) overflows or underflows.
      const float extremes[] = {-1000.f, 1000.f, -95.f, 95.f, -87.f};
      for (int64_t i = 0; i < std::min<int64_t>(I, 5); ++i) x[size_t(i)] = extremes[i];
      std::vector<float> y(size_t(M * I));
      std::vector<double> ref(y.size());
      for (int64_t m = 0; m < M; ++m)
        for (int64_t i = 0; i < I; ++i) {
          const double g = x[m * 2 * I + i], u = x[m * 2 * I + I + i];
          ref[m * I + i] = g / (1.0 + std::exp(-g)) * u;
        }
      Tensor yt(y.data(), DType::f32, {M, I});
      kern->swiglu(Tensor(x.data(), DType::f32, {M, 2 * I}), yt);
      EXPECT_LE(rel_error(y, ref), 1e-6);
    }
  }
  std::vector<float> a(12), b(12);
  Tensor y_bad(b.data(), DType::f32, {2, 4});
  test::expect_op_error("swiglu", [&] { kern->swiglu(Tensor(a.data(), DType::f32, {2, 6}), y_bad); });
}

TEST(CpuElementwise, AddIncludingInPlace) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(41));
  const int64_t R = 37, H = 1031;  // more than one parallel chunk
  std::vector<float> a = test::random_floats(rng, size_t(R * H)), b = test::random_floats(rng, size_t(R * H));
  std::vector<double> ref(a.size());
  for (size_t i = 0; i < a.size(); ++i) ref[i] = double(a[i]) + b[i];
  std::vector<float> out(a.size());
  Tensor at(a.data(), DType::f32, {R, H}), bt(b.data(), DType::f32, {R, H}), ot(out.data(), DType::f32, {R, H});
  kern->add(at, bt, ot);
  EXPECT_LE(rel_error(out, ref), 1e-7);
  kern->add(at, bt, at);  // out aliases a
  EXPECT_LE(rel_error(a, ref), 1e-7);
  Tensor shifted(b.data() + 1, DType::f32, {R, H - 1});
  Tensor short_b(b.data(), DType::f32, {R, H - 1});
  test::expect_op_error("add", [&] { kern->add(at, short_b, ot); });
  Tensor b_shift(b.data() + 1, DType::f32, {R - 1, H});
  Tensor a_part(a.data(), DType::f32, {R - 1, H});
  Tensor b_part(b.data(), DType::f32, {R - 1, H});
  test::expect_op_error("add", [&] { kern->add(a_part, b_part, b_shift); });
}

TEST(CpuElementwise, EmbeddingF32AndBf16) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(42));
  const int64_t V = 50, H = 19;
  std::vector<float> table = test::random_floats(rng, size_t(V * H), -5.f, 5.f);
  std::vector<uint16_t> table_bf16 = test::to_bf16_bits(table);
  std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  const int64_t T = int64_t(ids.size());
  for (bool bf16 : {false, true}) {
    std::vector<float> out(size_t(T * H), NAN);
    Tensor tab = bf16 ? Tensor(table_bf16.data(), DType::bf16, {V, H}) : Tensor(table.data(), DType::f32, {V, H});
    Tensor ot(out.data(), DType::f32, {T, H});
    kern->embedding(Tensor(ids.data(), DType::i32, {T}), tab, ot);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float w = table[ids[t] * H + h];
        ASSERT_EQ(out[t * H + h], bf16 ? round_bf16(w) : w) << "t " << t << " h " << h;
      }
  }
  std::vector<int32_t> bad = {1, 50};
  std::vector<float> out(2 * H);
  Tensor ot(out.data(), DType::f32, {2, H});
  test::expect_op_error("embedding", [&] {
    kern->embedding(Tensor(bad.data(), DType::i32, {2}), Tensor(table.data(), DType::f32, {V, H}), ot);
  });
}

TEST(CpuElementwise, GatherRows) {
  auto kern = make_cpu_kernels();
  std::vector<float> x(6 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  std::vector<int32_t> idx = {5, 0, 5, 2};
  std::vector<float> out(4 * 4);
  Tensor ot(out.data(), DType::f32, {4, 4});
  kern->gather_rows(Tensor(x.data(), DType::f32, {6, 4}), Tensor(idx.data(), DType::i32, {4}), ot);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(out[r * 4 + h], float(idx[r] * 4 + h));
  std::vector<int32_t> bad = {6};
  Tensor o1(out.data(), DType::f32, {1, 4});
  test::expect_op_error("gather_rows", [&] {
    kern->gather_rows(Tensor(x.data(), DType::f32, {6, 4}), Tensor(bad.data(), DType::i32, {1}), o1);
  });
}

// The oracle: among all 16-bit patterns near the truncation, the one whose value is nearest to x
// (ties to the even pattern), computed in double.
template <typename ToF32>
uint16_t nearest_16bit(float x, uint16_t guess, ToF32 to_f32) {
  uint16_t best = guess;
  double best_err = INFINITY;
  for (int delta = -2; delta <= 2; ++delta) {
    const uint16_t cand = uint16_t(guess + delta);
    if ((cand & 0x8000) != (guess & 0x8000)) continue;
    const double v = to_f32(cand);
    if (std::isnan(v)) continue;
    const double err = std::abs(v - double(x));
    if (err < best_err || (err == best_err && (cand & 1) == 0)) {
      best = cand;
      best_err = err;
    }
  }
  return best;
}

TEST(CpuElementwise, ConvertRoundsToNearestEven) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(43));
  std::vector<float> x = test::random_floats(rng, 5000, -1000.f, 1000.f);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 3000; ++i) {
    float f = bits_to_f32(bits(rng));
    if (std::isfinite(f) && std::abs(f) < 60000.f) x.push_back(f);  // also tiny and f16-subnormal values
  }
  x.push_back(1.f + 1.f / 256.f);          // exact bf16 tie → even (1.0)
  x.push_back(1.f + 3.f / 256.f);          // exact bf16 tie → even (1 + 4/256)
  x.push_back(std::ldexp(1.f, -20) * 1.5f);  // f16 subnormal range
  const int64_t n = int64_t(x.size());
  std::vector<uint16_t> bf(static_cast<size_t>(n)), hf(static_cast<size_t>(n));
  Tensor xt(x.data(), DType::f32, {n});
  Tensor bt(bf.data(), DType::bf16, {n}), ht(hf.data(), DType::f16, {n});
  kern->convert(xt, bt);
  kern->convert(xt, ht);
  auto bf_to = [](uint16_t b) { return double(bits_to_f32(uint32_t(b) << 16)); };
  auto hf_to = [](uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? double(NAN) : s * INFINITY;
    return e == 0 ? s * std::ldexp(double(m), -24) : s * std::ldexp(double(m | 0x400), e - 25);
  };
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bf_guess = uint16_t(f32_to_bits(x[i]) >> 16);
    ASSERT_EQ(bf[i], nearest_16bit(x[i], bf_guess, bf_to)) << "bf16 of " << x[i];
    // f16 guess from double arithmetic: the value scaled into the f16 grid.
    uint16_t h_guess = 0;
    {
      const double a = std::abs(double(x[i]));
      const int e = a == 0 ? -30 : std::ilogb(a);
      uint16_t sign = std::signbit(x[i]) ? 0x8000 : 0;
      if (e < -14) {
        h_guess = uint16_t(sign | uint16_t(std::floor(a / std::ldexp(1.0, -24))));
      } else {
        h_guess = uint16_t(sign | uint16_t((e + 15) << 10) | uint16_t(std::floor((a / std::ldexp(1.0, e) - 1) * 1024)));
      }
    }
    ASSERT_EQ(hf[i], nearest_16bit(x[i], h_guess, hf_to)) << "f16 of " << x[i];
  }
  // Back to f32 is exact, and bf16 → f16 goes through f32.
  std::vector<float> back(static_cast<size_t>(n));
  Tensor back_t(back.data(), DType::f32, {n});
  kern->convert(bt, back_t);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], float(bf_to(bf[i])));
  kern->convert(ht, back_t);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], float(hf_to(hf[i])));
  std::vector<uint16_t> h2(static_cast<size_t>(n));
  Tensor h2t(h2.data(), DType::f16, {n});
  kern->convert(bt, h2t);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h2[i], f32_to_f16(float(bf_to(bf[i]))).bits);
  // Overflow to infinity in f16, NaN stays NaN.
  std::vector<float> special = {70000.f, -70000.f, NAN};
  std::vector<uint16_t> sh(3), sb(3);
  Tensor sht(sh.data(), DType::f16, {3}), sbt(sb.data(), DType::bf16, {3});
  kern->convert(Tensor(special.data(), DType::f32, {3}), sht);
  kern->convert(Tensor(special.data(), DType::f32, {3}), sbt);
  EXPECT_EQ(sh[0], 0x7c00);
  EXPECT_EQ(sh[1], 0xfc00);
  EXPECT_TRUE(std::isnan(hf_to(sh[2])));
  EXPECT_TRUE(std::isnan(bf_to(sb[2])));
  std::vector<int32_t> ints(3);
  Tensor it(ints.data(), DType::i32, {3});
  test::expect_op_error("convert", [&] { kern->convert(Tensor(special.data(), DType::f32, {3}), it); });
  Tensor wrong(sh.data(), DType::f16, {2});
  test::expect_op_error("convert", [&] { kern->convert(Tensor(special.data(), DType::f32, {3}), wrong); });
}

}  // namespace
}  // namespace rill
