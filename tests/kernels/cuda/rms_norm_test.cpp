// CUDA rms_norm / add_rms_norm against double references that also emulate the rounding order
// of each NormParams flavour (Llama/Qwen3 two roundings, fp32 scale, 1 + w): the relative error
// must be < 1e-2 and ≥ 99% of outputs bit-equal to the emulation (label cuda). The widths reach
// each kernel path: per-warp rows, a block's rows held in registers, and the two-pass loop.
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/invariance_util.h"

namespace rill {
namespace {

using namespace cuda_test;

struct NormRef {
  std::vector<double> exact;
  std::vector<float> emulated;
};

NormRef norm_reference(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t dim,
                       const NormParams& p) {
  NormRef r{std::vector<double>(x.size()), std::vector<float>(x.size())};
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t c = 0; c < dim; ++c) ss += double(x[size_t(i * dim + c)]) * x[size_t(i * dim + c)];
    double inv = 1.0 / std::sqrt(ss / double(dim) + p.eps);
    for (int64_t c = 0; c < dim; ++c) {
      double xh = x[size_t(i * dim + c)] * inv;
      double wf = p.one_plus_weight ? 1.0 + w[size_t(c)] : w[size_t(c)];
      r.exact[size_t(i * dim + c)] = xh * wf;
      float xhf = float(xh);
      r.emulated[size_t(i * dim + c)] =
          p.scale_in_fp32 ? round_bf16(float(double(xhf) * wf)) : round_bf16(round_bf16(xhf) * float(wf));
    }
  }
  return r;
}

TEST(CudaRmsNorm, AllFlavoursAndWidths) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const NormParams flavours[] = {{1e-6f, false, false}, {1e-5f, false, true}, {1e-6f, true, true},
                                 {1e-6f, true, false}};
  // 4096 / 8200 / 2056: registers between the passes (one or two vectors a thread, or none for some
  // threads); 12288: past that path's reach (two passes); 4099 / 100: scalar.
  for (int64_t dim : {128, 1000, 4096, 8200, 2056, 12288, 4099, 100}) {
    for (const NormParams& p : flavours) {
      for (bool f32_weight : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << " one_plus " << p.one_plus_weight << " fp32 "
                                          << p.scale_in_fp32 << " f32 weight " << f32_weight);
        const int64_t rows = 13;
        auto x = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
        auto w = random_bf16_values(rng, size_t(dim), p.one_plus_weight ? -0.5f : 0.5f, 1.5f);
        DevTensor dx = upload_bf16(x, {rows, dim}), dy(DType::bf16, {rows, dim});
        DevTensor dw = f32_weight ? upload_f32(w, {dim}) : upload_bf16(w, {dim});
        dy.poison();
        backend().rms_norm(dx.t, dw.t, p, dy.t);
        auto y = download_bf16(dy);
        auto ref = norm_reference(x, w, rows, dim, p);
        EXPECT_LT(rel_error(y, ref.exact), 1e-2);
        EXPECT_GT(exact_fraction(y, ref.emulated), 0.99);
        // In place.
        backend().rms_norm(dx.t, dw.t, p, dx.t);
        EXPECT_EQ(download_bf16(dx), y);
      }
    }
  }
}

TEST(CudaRmsNorm, TwoRoundingsDifferFromOne) {
  // Guards the test itself: the two flavours must be distinguishable by exact_fraction.
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const int64_t rows = 8, dim = 4096;
  auto x = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
  auto w = random_bf16_values(rng, size_t(dim), 0.5f, 1.5f);
  DevTensor dx = upload_bf16(x, {rows, dim}), dw = upload_bf16(w, {dim}), dy(DType::bf16, {rows, dim});
  NormParams llama{1e-6f, false, false}, fp32{1e-6f, false, true};
  backend().rms_norm(dx.t, dw.t, llama, dy.t);
  auto y = download_bf16(dy);
  EXPECT_LT(exact_fraction(y, norm_reference(x, w, rows, dim, fp32).emulated), 0.95);
}

TEST(CudaRmsNorm, FusedAddRmsNorm) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t dim : {4096, 8200, 12288, 4099, 64}) {
    const int64_t rows = 11;
    NormParams p{1e-6f, false, false};
    auto r = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
    auto x = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
    auto w = random_bf16_values(rng, size_t(dim), 0.5f, 1.5f);
    DevTensor dr = upload_bf16(r, {rows, dim}), dx = upload_bf16(x, {rows, dim}), dw = upload_bf16(w, {dim});
    DevTensor dy(DType::bf16, {rows, dim});
    dy.poison();
    backend().add_rms_norm(dr.t, dx.t, dw.t, p, dy.t);
    std::vector<float> sum(r.size());
    for (size_t i = 0; i < r.size(); ++i) sum[i] = round_bf16(r[i] + x[i]);
    EXPECT_EQ(download_bf16(dr), sum) << "dim " << dim;
    auto ref = norm_reference(sum, w, rows, dim, p);
    auto y = download_bf16(dy);
    EXPECT_LT(rel_error(y, ref.exact), 1e-2) << "dim " << dim;
    EXPECT_GT(exact_fraction(y, ref.emulated), 0.99) << "dim " << dim;
  }
}

// The add + RMSNorm rows of 1,025-8,192 on a cluster of 2, 4 or 8 blocks (set_norm_cluster): the bits of
// one block a row, for the new residual and the output, at row widths that leave some blocks' threads
// past the row's end.
TEST(CudaRmsNorm, ClusterRowsKeepBits) {
  RILL_REQUIRE_GPU();
  if (backend().info().cc_major < 9) GTEST_SKIP() << "thread-block clusters need sm_90";
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int restore = cuda::norm_cluster();
  for (int64_t dim : {4096, 8192, 2560, 1032}) {
    for (int64_t rows : {1, 3, 40}) {
      NormParams p{1e-6f, false, false};
      auto r = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
      auto x = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
      auto w = random_bf16_values(rng, size_t(dim), 0.5f, 1.5f);
      std::vector<float> want_y, want_r;
      for (int blocks : {0, 2, 4, 8, 16, -1}) {  // -1: the default rule (8 / 4 / 2 by rows)
        cuda::set_norm_cluster(blocks);
        DevTensor dr = upload_bf16(r, {rows, dim}), dx = upload_bf16(x, {rows, dim}), dw = upload_bf16(w, {dim});
        DevTensor dy(DType::bf16, {rows, dim});
        dy.poison();
        backend().add_rms_norm(dr.t, dx.t, dw.t, p, dy.t);
        auto y = download_bf16(dy), res = download_bf16(dr);
        if (blocks == 0) {
          want_y = y, want_r = res;
          continue;
        }
        EXPECT_EQ(differing_bits(want_y, y), 0u) << "dim " << dim << " rows " << rows << " cluster " << blocks;
        EXPECT_EQ(differing_bits(want_r, res), 0u) << "dim " << dim << " rows " << rows << " cluster " << blocks;
      }
    }
  }
  cuda::set_norm_cluster(restore);
}

}  // namespace
}  // namespace rill
