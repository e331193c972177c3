// CPU rope against a double-precision reference of HF's rotate-half formula: the angle is the f32
// product float(pos) * inv_freq[j] (exact in double, then rounded once), cos/sin and the rotation in
// double. Covers Hq != Hkv, partial rotary (dims past rotary_dim untouched), attention_factor != 1.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

using test::rel_error;

std::vector<double> reference(const std::vector<float>& x, const std::vector<int32_t>& pos,
                              const std::vector<float>& inv_freq, int64_t T, int64_t H, int64_t D, int64_t rd,
                              double factor) {
  std::vector<double> y(x.begin(), x.end());
  const int64_t half = rd / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < half; ++j) {
        const float angle = float(double(float(pos[t])) * double(inv_freq[j]));  // the f32 product
        const double c = std::cos(double(angle)) * factor, s = std::sin(double(angle)) * factor;
        const size_t i1 = size_t((t * H + h) * D + j), i2 = i1 + size_t(half);
        y[i1] = double(x[i1]) * c - double(x[i2]) * s;
        y[i2] = double(x[i2]) * c + double(x[i1]) * s;
      }
  return y;
}

struct RopeCase {
  int64_t T, Hq, Hkv, D, rd;
  float factor;
  double base;
};

TEST(CpuRope, MatchesReference) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(20);
  std::mt19937 rng(seed);
  const RopeCase cases[] = {
      {1, 16, 8, 128, 128, 1.f, 1e6},     // Qwen3 decode token
      {17, 4, 1, 64, 64, 1.f, 1e4},       // MQA, several tokens
      {9, 6, 2, 128, 32, 1.f, 1e4},       // partial rotary: a quarter of the dims
      {5, 2, 2, 96, 48, 1.2f, 5e5},       // YaRN-style attention_factor
      {3, 3, 1, 10, 6, 0.75f, 100.0},     // tiny odd head count, partial
  };
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv
                                    << " D " << c.D << " rd " << c.rd << " factor " << c.factor);
    std::vector<float> q = test::random_floats(rng, size_t(c.T * c.Hq * c.D));
    std::vector<float> k = test::random_floats(rng, size_t(c.T * c.Hkv * c.D));
    std::vector<int32_t> pos(size_t(c.T));
    std::uniform_int_distribution<int32_t> pd(0, 40000);
    for (auto& p : pos) p = pd(rng);
    pos[0] = 0;
    std::vector<float> inv_freq(size_t(c.rd / 2));
    for (size_t j = 0; j < inv_freq.size(); ++j)
      inv_freq[j] = float(1.0 / std::pow(c.base, double(2 * j) / double(c.rd)));  // arbitrary table
    std::vector<double> q_ref = reference(q, pos, inv_freq, c.T, c.Hq, c.D, c.rd, c.factor);
    std::vector<double> k_ref = reference(k, pos, inv_freq, c.T, c.Hkv, c.D, c.rd, c.factor);
    std::vector<float> q_pass = q;
    Tensor qt(q.data(), DType::f32, {c.T, c.Hq, c.D});
    Tensor kt(k.data(), DType::f32, {c.T, c.Hkv, c.D});
    Tensor pt(pos.data(), DType::i32, {c.T});
    RopeTable table;
    table.inv_freq = Tensor(inv_freq.data(), DType::f32, {c.rd / 2});
    table.rotary_dim = int(c.rd);
    table.attention_factor = c.factor;
    kern->rope(qt, kt, pt, table);
    EXPECT_LE(rel_error(q, q_ref), 1e-5);
    EXPECT_LE(rel_error(k, k_ref), 1e-5);
    // Pass-through dims are bit-identical.
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t d = c.rd; d < c.D; ++d) {
          const size_t i = size_t((t * c.Hq + h) * c.D + d);
          ASSERT_EQ(q[i], q_pass[i]);
        }
  }
}

TEST(CpuRope, RejectsBadArguments) {
  auto kern = make_cpu_kernels();
  std::vector<float> qs(2 * 4 * 8), ks(2 * 2 * 8), fs(4);
  std::vector<int32_t> ps(2);
  Tensor q(qs.data(), DType::f32, {2, 4, 8});
  Tensor k(ks.data(), DType::f32, {2, 2, 8});
  Tensor k_bad_d(ks.data(), DType::f32, {2, 4, 4});
  Tensor pos(ps.data(), DType::i32, {2});
  Tensor pos_bad(ps.data(), DType::i32, {1});
  RopeTable table;
  table.inv_freq = Tensor(fs.data(), DType::f32, {4});
  table.rotary_dim = 8;
  test::expect_op_error("rope", [&] { kern->rope(q, k_bad_d, pos, table); });
  test::expect_op_error("rope", [&] { kern->rope(q, k, pos_bad, table); });
  RopeTable odd = table;
  odd.rotary_dim = 7;
  test::expect_op_error("rope", [&] { kern->rope(q, k, pos, odd); });
  RopeTable too_wide = table;
  too_wide.rotary_dim = 10;
  test::expect_op_error("rope", [&] { kern->rope(q, k, pos, too_wide); });
  RopeTable short_table = table;
  short_table.rotary_dim = 6;  // inv_freq has 4 entries, needs 3
  test::expect_op_error("rope", [&] { kern->rope(q, k, pos, short_table); });
}

}  // namespace
}  // namespace rill
