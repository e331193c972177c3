// CUDA matmul against a double-precision reference on bf16-rounded inputs: every candidate path
// (matvec with each split factor, each cuBLASLt algorithm) and the cached automatic choice, on
// ragged shapes, with and without bias; the batch-invariant GEMM on fresh random ragged shapes
// (label cuda).
#include "kernels/cuda/cuda_test_util.h"

namespace rill {
namespace {

using namespace cuda_test;

struct Shape {
  int64_t m, n, k;
  bool bias;
};

std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* b,
                              int64_t m, int64_t n, int64_t k) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = b ? (*b)[size_t(j)] : 0.0;
      const float* xr = &x[size_t(i * k)];
      const float* wr = &w[size_t(j * k)];
      for (int64_t l = 0; l < k; ++l) s += double(xr[l]) * double(wr[l]);
      y[size_t(i * n + j)] = s;
    }
  return y;
}

// The autotuned (non-invariant) engine, restored to the backend's default afterwards.
struct AutotunedMode {
  bool saved = backend().batch_invariant();
  AutotunedMode() { backend().set_batch_invariant(false); }
  ~AutotunedMode() { backend().set_batch_invariant(saved); }
};

TEST(CudaMatmul, EveryPathMatchesReference) {
  RILL_REQUIRE_GPU();
  AutotunedMode mode;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Shape shapes[] = {{1, 4099, 1024, false}, {1, 256, 8200, true},  {3, 1000, 4104, false},
                          {8, 515, 2056, true},   {5, 77, 4099, false},  {17, 300, 1000, true},
                          {64, 1030, 520, false}, {257, 333, 136, true}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "M=" << s.m << " N=" << s.n << " K=" << s.k << " bias=" << s.bias);
    auto x = random_bf16_values(rng, size_t(s.m * s.k));
    auto w = random_bf16_values(rng, size_t(s.n * s.k));
    auto b = random_bf16_values(rng, size_t(s.n));
    DevTensor dx = upload_bf16(x, {s.m, s.k}), dw = upload_bf16(w, {s.n, s.k}), db = upload_bf16(b, {s.n});
    DevTensor dy(DType::bf16, {s.m, s.n});
    auto ref = reference(x, w, s.bias ? &b : nullptr, s.m, s.n, s.k);
    auto& engine = backend().matmul_engine();
    auto cands = engine.candidates(dx.t.data(), dw.t.data(), s.bias ? db.t.data() : nullptr, dy.t.data(), s.m, s.n, s.k);
    ASSERT_FALSE(cands.empty());
    if (s.m <= 8 && s.k % 8 == 0) {
      bool has_matvec = false;
      for (auto& c : cands) has_matvec |= c.path == cuda::MatmulChoice::Path::matvec;
      EXPECT_TRUE(has_matvec);
    }
    for (const auto& c : cands) {
      dy.poison();
      engine.run_with(c, dx.t.data(), dw.t.data(), s.bias ? db.t.data() : nullptr, dy.t.data(), s.m, s.n, s.k);
      EXPECT_LT(rel_error(download_bf16(dy), ref), 1e-2) << c.describe();
    }
    dy.poison();
    backend().matmul(dx.t, dw.t, s.bias ? &db.t : nullptr, dy.t);
    EXPECT_LT(rel_error(download_bf16(dy), ref), 1e-2) << "automatic";
    const auto* chosen = engine.cached_choice(s.m, s.n, s.k, s.bias);
    ASSERT_NE(chosen, nullptr);
    // Second call reuses the cached plan and gives the same bits.
    auto first = download_bf16(dy);
    dy.poison();
    backend().matmul(dx.t, dw.t, s.bias ? &db.t : nullptr, dy.t);
    EXPECT_EQ(download_bf16(dy), first);
  }
}

TEST(CudaMatmul, SplitKAtDecodeShape) {
  RILL_REQUIRE_GPU();
  AutotunedMode mode;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t m = 2, n = 1024, k = 12288;
  auto x = random_bf16_values(rng, size_t(m * k)), w = random_bf16_values(rng, size_t(n * k));
  DevTensor dx = upload_bf16(x, {m, k}), dw = upload_bf16(w, {n, k}), dy(DType::bf16, {m, n});
  auto ref = reference(x, w, nullptr, m, n, k);
  for (int splits : {1, 2, 3, 7, 16}) {
    dy.poison();
    cuda::MatmulChoice c{cuda::MatmulChoice::Path::matvec, splits, 0};
    backend().matmul_engine().run_with(c, dx.t.data(), dw.t.data(), nullptr, dy.t.data(), m, n, k);
    EXPECT_LT(rel_error(download_bf16(dy), ref), 1e-2) << "splits " << splits;
  }
}

// The batch-invariant GEMM (the default path) on random ragged shapes: M in 1..700 (every tile
// configuration and both split-K schedules), odd N, K a multiple of 8 (tails of 8 past a
// multiple of 16 included), with and without bias.
TEST(CudaMatmul, InvariantGemmMatchesReference) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant()) << "batch-invariant mode must be the default";
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dm(1, 700), dn(1, 700), dk(1, 300);
  // K = 1001: the scalar fallback for K % 8 != 0.
  std::vector<Shape> shapes{
      {1, 4097, 2048, false}, {8, 1023, 12296, true}, {700, 333, 1032, true}, {5, 77, 1001, true}};
  for (int i = 0; i < 9; ++i) shapes.push_back({dm(rng), dn(rng) | 1, dk(rng) * 8, i % 2 == 0});
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "M=" << s.m << " N=" << s.n << " K=" << s.k << " bias=" << s.bias);
    auto x = random_bf16_values(rng, size_t(s.m * s.k));
    auto w = random_bf16_values(rng, size_t(s.n * s.k));
    auto b = random_bf16_values(rng, size_t(s.n));
    DevTensor dx = upload_bf16(x, {s.m, s.k}), dw = upload_bf16(w, {s.n, s.k}), db = upload_bf16(b, {s.n});
    DevTensor dy(DType::bf16, {s.m, s.n});
    dy.poison();
    backend().matmul(dx.t, dw.t, s.bias ? &db.t : nullptr, dy.t);
    auto out = download_bf16(dy);
    auto ref = reference(x, w, s.bias ? &b : nullptr, s.m, s.n, s.k);
    EXPECT_LT(rel_error(out, ref), 1e-2);
    for (int64_t i = 0; i < s.m; ++i) {  // per row, so a wrong tile edge cannot hide
      std::vector<float> o(out.begin() + i * s.n, out.begin() + (i + 1) * s.n);
      std::vector<double> r(ref.begin() + i * s.n, ref.begin() + (i + 1) * s.n);
      ASSERT_LT(rel_error(o, r), 2e-2) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace rill
