// CPU rms_norm / add_rms_norm against a double-precision reference: ragged widths, f32 and bf16
// weights, (1 + w) weights, in-place use (y aliasing x), and argument checks.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

using test::rel_error;

std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t D,
                              double eps, bool one_plus) {
  std::vector<double> y(x.size());
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[m * D + d]) * x[m * D + d];
    const double inv = 1.0 / std::sqrt(ss / double(D) + eps);
    for (int64_t d = 0; d < D; ++d) y[m * D + d] = x[m * D + d] * inv * (one_plus ? 1.0 + w[d] : double(w[d]));
  }
  return y;
}

TEST(CpuNorm, RmsNormMatchesReference) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(10);
  std::mt19937 rng(seed);
  for (int64_t M : {1, 3, 17}) {
    for (int64_t D : {1, 7, 64, 1000, 4099}) {
      for (bool bf16 : {false, true}) {
        for (bool one_plus : {false, true}) {
          for (bool in_place : {false, true}) {
            SCOPED_TRACE(testing::Message() << "seed " << seed << " M " << M << " D " << D << (bf16 ? " bf16" : "")
                                            << (one_plus ? " 1+w" : "") << (in_place ? " in-place" : ""));
            std::vector<float> x = test::random_floats(rng, size_t(M * D), -3.f, 3.f);
            std::vector<float> w = test::random_floats(rng, size_t(D), -2.f, 2.f);
            std::vector<uint16_t> wb = test::to_bf16_bits(w);
            if (bf16) w = test::bf16_bits_to_f32(wb);
            NormParams p;
            p.eps = (D % 2) ? 1e-6f : 1e-5f;
            p.one_plus_weight = one_plus;
            std::vector<double> ref = reference(x, w, M, D, p.eps, one_plus);
            std::vector<float> y(x.size(), -1.f);
            Tensor xt(x.data(), DType::f32, {M, D});
            Tensor wt = bf16 ? Tensor(wb.data(), DType::bf16, {D}) : Tensor(w.data(), DType::f32, {D});
            Tensor yt = in_place ? xt : Tensor(y.data(), DType::f32, {M, D});
            kern->rms_norm(xt, wt, p, yt);
            EXPECT_LE(rel_error(in_place ? x : y, ref), 1e-5);
          }
        }
      }
    }
  }
}

TEST(CpuNorm, AddRmsNormUpdatesResidualAndNormalizes) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(11);
  std::mt19937 rng(seed);
  for (int64_t M : {1, 3, 17}) {
    for (int64_t D : {7, 64, 1024}) {
      for (bool y_is_x : {false, true}) {
        SCOPED_TRACE(testing::Message() << "seed " << seed << " M " << M << " D " << D << (y_is_x ? " y=x" : ""));
        std::vector<float> res = test::random_floats(rng, size_t(M * D), -2.f, 2.f);
        std::vector<float> x = test::random_floats(rng, size_t(M * D), -2.f, 2.f);
        std::vector<float> w = test::random_floats(rng, size_t(D), -2.f, 2.f);
        std::vector<float> sum(res.size());
        std::vector<double> sum_ref(res.size());
        for (size_t i = 0; i < res.size(); ++i) {
          sum[i] = res[i] + x[i];  // the f32 residual stream, as the model keeps it
          sum_ref[i] = sum[i];
        }
        NormParams p;
        std::vector<double> ref = reference(sum, w, M, D, p.eps, false);
        std::vector<float> y(x.size());
        Tensor rt(res.data(), DType::f32, {M, D});
        Tensor xt(x.data(), DType::f32, {M, D});
        Tensor wt(w.data(), DType::f32, {D});
        Tensor yt = y_is_x ? xt : Tensor(y.data(), DType::f32, {M, D});
        kern->add_rms_norm(rt, xt, wt, p, yt);
        EXPECT_EQ(rel_error(res, sum_ref), 0.0);
        EXPECT_LE(rel_error(y_is_x ? x : y, ref), 1e-5);
      }
    }
  }
}

TEST(CpuNorm, PerHeadViewNormalizesEachHead) {
  // q/k norm: x [T, H, D] viewed as [T*H, D] normalizes every head on its own.
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(12));
  const int64_t T = 5, H = 3, D = 128;
  std::vector<float> x = test::random_floats(rng, size_t(T * H * D), -4.f, 4.f);
  std::vector<float> w = test::random_floats(rng, size_t(D));
  std::vector<double> ref = reference(x, w, T * H, D, 1e-6, false);
  Tensor xt = Tensor(x.data(), DType::f32, {T, H, D}).view({T * H, D});
  Tensor wt(w.data(), DType::f32, {D});
  kern->rms_norm(xt, wt, NormParams{}, xt);
  EXPECT_LE(rel_error(x, ref), 1e-5);
}

TEST(CpuNorm, RejectsBadArguments) {
  auto kern = make_cpu_kernels();
  std::vector<float> a(64), b(64), c(64);
  Tensor x(a.data(), DType::f32, {2, 8});
  Tensor y(b.data(), DType::f32, {2, 8});
  Tensor w(c.data(), DType::f32, {8});
  Tensor w_bad(c.data(), DType::f32, {7});
  Tensor y_bad(b.data(), DType::f32, {2, 7});
  Tensor y_shifted(a.data() + 1, DType::f32, {2, 8});
  Tensor x_rank1(a.data(), DType::f32, {16});
  NormParams p;
  test::expect_op_error("rms_norm", [&] { kern->rms_norm(x, w_bad, p, y); });
  test::expect_op_error("rms_norm", [&] { kern->rms_norm(x, w, p, y_bad); });
  test::expect_op_error("rms_norm", [&] { kern->rms_norm(x, w, p, y_shifted); });
  test::expect_op_error("rms_norm", [&] { kern->rms_norm(x_rank1, w, p, y); });
  NormParams bad_eps;
  bad_eps.eps = -1.f;
  test::expect_op_error("rms_norm", [&] { kern->rms_norm(x, w, bad_eps, y); });
  Tensor res(c.data(), DType::f32, {2, 8});
  Tensor res_bad(c.data(), DType::f32, {2, 4});
  test::expect_op_error("add_rms_norm", [&] { kern->add_rms_norm(res_bad, x, w, p, y); });
  test::expect_op_error("add_rms_norm", [&] { kern->add_rms_norm(x, x, w, p, y); });
}

}  // namespace
}  // namespace rill
