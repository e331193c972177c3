// CPU matmul against a naive double-precision reference: ragged M/K/N, f32 and bf16 weights
// (the reference uses the bf16-rounded weights), optional bias, every compiled SIMD target.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <tuple>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

using test::rel_error;

struct MatmulCase {
  std::vector<float> x, w_f32, bias_f32, y;
  std::vector<uint16_t> w_bf16, bias_bf16;
  std::vector<double> ref;
};

// x[M,K], w[N,K]; weights rounded to bf16 first when `bf16`, so the reference sees what the kernel sees.
MatmulCase make_case(std::mt19937& rng, int64_t M, int64_t K, int64_t N, bool bf16, bool bias) {
  MatmulCase c;
  c.x = test::random_floats(rng, size_t(M * K));
  c.w_f32 = test::random_floats(rng, size_t(N * K));
  if (bias) c.bias_f32 = test::random_floats(rng, size_t(N));
  if (bf16) {
    c.w_bf16 = test::to_bf16_bits(c.w_f32);
    c.w_f32 = test::bf16_bits_to_f32(c.w_bf16);
    c.bias_bf16 = test::to_bf16_bits(c.bias_f32);
    c.bias_f32 = test::bf16_bits_to_f32(c.bias_bf16);
  }
  c.y.assign(size_t(M * N), -7.f);
  c.ref.assign(size_t(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? c.bias_f32[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double(c.x[m * K + k]) * c.w_f32[n * K + k];
      c.ref[m * N + n] = s;
    }
  return c;
}

void run(Kernels& kern, MatmulCase& c, int64_t M, int64_t K, int64_t N, bool bf16, bool bias) {
  Tensor x(c.x.data(), DType::f32, {M, K});
  Tensor w = bf16 ? Tensor(c.w_bf16.data(), DType::bf16, {N, K}) : Tensor(c.w_f32.data(), DType::f32, {N, K});
  Tensor b = bf16 ? Tensor(c.bias_bf16.data(), DType::bf16, {N}) : Tensor(c.bias_f32.data(), DType::f32, {N});
  Tensor y(c.y.data(), DType::f32, {M, N});
  kern.matmul(x, w, bias ? &b : nullptr, y);
}

TEST(CpuMatmul, MatchesDoubleReferenceOnRaggedShapes) {
  auto kern = make_cpu_kernels();
  uint32_t seed = test::test_seed(1);
  std::mt19937 rng(seed);
  for (int64_t M : {1, 2, 3, 4, 5, 9, 14, 17}) {
    for (int64_t K : {1, 7, 64, 4099}) {
      for (int64_t N : {1, 5, 130}) {
        for (bool bf16 : {false, true}) {
          const bool bias = (M + K + N) % 2 == 1;
          SCOPED_TRACE(testing::Message() << "seed " << seed << " M " << M << " K " << K << " N " << N
                                          << (bf16 ? " bf16" : " f32") << (bias ? " +bias" : ""));
          MatmulCase c = make_case(rng, M, K, N, bf16, bias);
          run(*kern, c, M, K, N, bf16, bias);
          // f32 accumulation of K ≤ 4099 products of values in [-1, 1]: error ~ sqrt(K) ulp.
          EXPECT_LE(rel_error(c.y, c.ref), 1e-5);
        }
      }
    }
  }
}

TEST(CpuMatmul, LargePanelsAndEveryTarget) {
  auto kern = make_cpu_kernels();
  uint32_t seed = test::test_seed(2);
  std::mt19937 rng(seed);
  const int64_t M = 37, K = 1024 + 3, N = 261;
  MatmulCase c_bf16 = make_case(rng, M, K, N, true, true);
  MatmulCase c_f32 = make_case(rng, M, K, N, false, false);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(testing::Message() << "seed " << seed << " target " << hwy::TargetName(target));
    run(*kern, c_bf16, M, K, N, true, true);
    EXPECT_LE(rel_error(c_bf16.y, c_bf16.ref), 1e-5);
    run(*kern, c_f32, M, K, N, false, false);
    EXPECT_LE(rel_error(c_f32.y, c_f32.ref), 1e-5);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// A row's result must not depend on the other rows of the call (decode vs prefill path).
TEST(CpuMatmul, RowResultIndependentOfBatch) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(3));
  const int64_t M = 9, K = 2 * 1024 + 5, N = 67;  // several k blocks and a tail
  MatmulCase c = make_case(rng, M, K, N, true, true);
  run(*kern, c, M, K, N, true, true);
  for (int64_t m = 0; m < M; ++m) {
    std::vector<float> single_row(static_cast<size_t>(N));
    Tensor x(c.x.data() + m * K, DType::f32, {1, K});
    Tensor w(c.w_bf16.data(), DType::bf16, {N, K});
    Tensor b(c.bias_bf16.data(), DType::bf16, {N});
    Tensor y(single_row.data(), DType::f32, {1, N});
    kern->matmul(x, w, &b, y);
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(single_row[n], c.y[m * N + n]) << "row " << m << " col " << n;
  }
}

// matmul_outputs (fused q/k/v projections): the outputs are the column ranges of one matmul,
// bitwise, with and without bias; widths that do not add up to w's rows are an error.
TEST(CpuMatmul, OutputsAreColumnRangesOfOneMatmul) {
  auto kern = make_cpu_kernels();
  std::mt19937 rng(test::test_seed(4));
  const int64_t M = 5, K = 300, N = 48 + 16 + 16;
  for (bool bias : {false, true}) {
    MatmulCase c = make_case(rng, M, K, N, true, bias);
    run(*kern, c, M, K, N, true, bias);
    Tensor x(c.x.data(), DType::f32, {M, K});
    Tensor w(c.w_bf16.data(), DType::bf16, {N, K});
    Tensor b(c.bias_bf16.data(), DType::bf16, {N});
    std::vector<float> q(size_t(M * 48)), k(size_t(M * 16)), v(size_t(M * 16));
    Tensor yq(q.data(), DType::f32, {M, 48}), yk(k.data(), DType::f32, {M, 16}), yv(v.data(), DType::f32, {M, 16});
    Tensor* const outs[] = {&yq, &yk, &yv};
    kern->matmul_outputs(x, w, bias ? &b : nullptr, outs);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float got = n < 48 ? q[m * 48 + n] : n < 64 ? k[m * 16 + n - 48] : v[m * 16 + n - 64];
        ASSERT_EQ(got, c.y[m * N + n]) << "row " << m << " col " << n << " bias " << bias;
      }
    std::vector<float> spare(size_t(M * 8));
    Tensor y_short(spare.data(), DType::f32, {M, 8});
    Tensor* const bad[] = {&yq, &y_short};
    test::expect_op_error("matmul_outputs", [&] { kern->matmul_outputs(x, w, nullptr, bad); });
  }
}

TEST(CpuMatmul, RejectsBadArguments) {
  auto kern = make_cpu_kernels();
  std::vector<float> xs(64), ws(64), ys(64), bs(8);
  std::vector<int32_t> is(64);
  Tensor x(xs.data(), DType::f32, {2, 4});
  Tensor w(ws.data(), DType::f32, {3, 4});
  Tensor y(ys.data(), DType::f32, {2, 3});
  Tensor w_bad_k(ws.data(), DType::f32, {3, 5});
  Tensor y_bad(ys.data(), DType::f32, {2, 4});
  Tensor x_i32(is.data(), DType::i32, {2, 4});
  Tensor x_rank3(xs.data(), DType::f32, {1, 2, 4});
  Tensor bias_bad(bs.data(), DType::f32, {4});
  Tensor y_alias_x(xs.data(), DType::f32, {2, 3});
  test::expect_op_error("matmul", [&] { kern->matmul(x, w_bad_k, nullptr, y); });
  test::expect_op_error("matmul", [&] { kern->matmul(x, w, nullptr, y_bad); });
  test::expect_op_error("matmul", [&] { kern->matmul(x_i32, w, nullptr, y); });
  test::expect_op_error("matmul", [&] { kern->matmul(x_rank3, w, nullptr, y); });
  test::expect_op_error("matmul", [&] { kern->matmul(x, w, &bias_bad, y); });
  test::expect_op_error("matmul", [&] { kern->matmul(x, w, nullptr, y_alias_x); });
  Tensor w_gpu(ws.data(), DType::f32, {3, 4}, Device::cuda);
  test::expect_op_error("matmul", [&] { kern->matmul(x, w_gpu, nullptr, y); });
}

}  // namespace
}  // namespace rill
