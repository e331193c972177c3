// CUDA rms_norm / add_rms_norm against double references that also emulate the rounding order
// of each NormParams flavour (Llama/Qwen3 two roundings, fp32 scale, 1 + w): the relative error
// must be < 1e-2 and ≥ 99% of outputs bit-equal to the emulation (label cuda). The widths reach
// each kernel path: per-warp rows, a block's rows held in registers, and the two-pass loop.
#include "kernels/cuda/cuda_test_util.h"

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

// The cluster path (set_norm_cluster: a row over 8 CTAs, the warp sums exchanged through distributed
// shared memory) must give the one-block kernel's bits: y, the residual, and x written back from
// deferred partials; rows 1, 3 and 64, widths of one and two vectors a thread (4096, 5120, 8192),
// bf16 and f32 weights, plain rms_norm, add_rms_norm, add_rms_norm on 3 and 8 ranges of partials.
TEST(CudaRmsNorm, ClusterEqualsBlock) {
  RILL_REQUIRE_GPU();
  (void)backend();
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "thread-block clusters need sm_90";
  struct Restore {
    bool on = cuda::norm_cluster_enabled();
    ~Restore() { cuda::set_norm_cluster(on); }
  } restore;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t dim : {4096, 5120, 8192}) {
    for (int64_t rows : {1, 3, 64}) {
      for (int mode = 0; mode < 4; ++mode) {  // rms_norm, add_rms_norm, + 3 ranges of partials, + 8
        SCOPED_TRACE(::testing::Message() << "dim " << dim << " rows " << rows << " mode " << mode);
        const int splits = mode == 2 ? 3 : mode == 3 ? 8 : 0;
        const bool f32_w = mode == 1;
        const auto x0 = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
        const auto r0 = random_bf16_values(rng, size_t(rows * dim), -3.f, 3.f);
        const auto w0 = random_bf16_values(rng, size_t(dim), 0.5f, 1.5f);
        const auto p0 = random_bf16_values(rng, size_t(std::max(splits, 1)) * size_t(rows * dim), -1.f, 1.f);
        DevTensor dw = f32_w ? upload_f32(w0, {dim}) : upload_bf16(w0, {dim});
        DevTensor dp = upload_f32(p0, {int64_t(std::max(splits, 1)), rows, dim});
        auto run = [&](bool cluster) {
          cuda::set_norm_cluster(cluster);
          DevTensor dx = upload_bf16(x0, {rows, dim}), dr = upload_bf16(r0, {rows, dim}), dy(DType::bf16, {rows, dim});
          dy.poison();
          if (splits > 0) dx.poison();  // written back from the partials
          cuda::RmsNormArgs a;
          a.x = dx.t.data();
          a.residual = mode == 0 ? nullptr : dr.t.data();
          a.w = dw.t.data();
          a.w_dtype = f32_w ? DType::f32 : DType::bf16;
          a.y = dy.t.data();
          a.rows = rows;
          a.dim = dim;
          if (splits > 0) {
            a.x_partials.ws = static_cast<const float*>(dp.t.data());
            a.x_partials.n = dim;
            a.x_partials.plane = rows * dim;
            a.x_partials.splits = splits;
          }
          cuda::launch_rms_norm(a, backend().stream());
          return std::vector<std::vector<float>>{download_bf16(dy), download_bf16(dr), download_bf16(dx)};
        };
        const auto want = run(false), got = run(true);
        const char* names[] = {"y", "residual", "x"};
        for (size_t i = 0; i < want.size(); ++i) {
          for (float v : want[i]) ASSERT_FALSE(std::isnan(v)) << names[i] << ": unwritten output";
          EXPECT_EQ(want[i], got[i]) << names[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace rill
