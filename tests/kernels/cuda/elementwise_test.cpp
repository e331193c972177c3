// CUDA elementwise and row-reduction ops against double-precision / exact host references on
// fresh random inputs with ragged sizes: swiglu, add, convert, embedding, gather_rows, argmax,
// softmax (label cuda).
#include <algorithm>
#include <cstdlib>
#include <limits>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/ops.h"

namespace rill {
namespace {

using namespace cuda_test;

TEST(CudaElementwise, SwigluMatchesTorchRounding) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t inter : {4099, 4096, 4104, 4098, 1}) {  // per element, 8 a thread (2), pairs
    const int64_t m = 7;
    auto x = random_bf16_values(rng, size_t(m * 2 * inter), -6.f, 6.f);
    DevTensor dx = upload_bf16(x, {m, 2 * inter});
    DevTensor dy(DType::bf16, {m, inter});
    dy.poison();
    backend().swiglu(dx.t, dy.t);
    auto y = download_bf16(dy);
    std::vector<double> ref(y.size());
    std::vector<float> emul(y.size());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < inter; ++c) {
        double g = x[size_t(r * 2 * inter + c)], u = x[size_t(r * 2 * inter + inter + c)];
        double s = g / (1 + std::exp(-g));
        ref[size_t(r * inter + c)] = s * u;
        emul[size_t(r * inter + c)] = round_bf16(round_bf16(float(s)) * float(u));
      }
    EXPECT_LT(rel_error(y, ref), 1e-2) << "inter " << inter;
    EXPECT_GT(exact_fraction(y, emul), 0.99) << "inter " << inter;
  }
}

TEST(CudaElementwise, AddBf16AndF32) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t n : {4099, 4098}) {
    auto a = random_bf16_values(rng, size_t(n), -4.f, 4.f), b = random_bf16_values(rng, size_t(n), -4.f, 4.f);
    DevTensor da = upload_bf16(a, {n}), db = upload_bf16(b, {n}), dout(DType::bf16, {n});
    dout.poison();
    backend().add(da.t, db.t, dout.t);
    auto out = download_bf16(dout);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[size_t(i)], round_bf16(a[size_t(i)] + b[size_t(i)])) << i;
    // In place (out aliases a).
    backend().add(da.t, db.t, da.t);
    auto out2 = download_bf16(da);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out2[size_t(i)], out[size_t(i)]) << i;
  }
  const int64_t n = 1001;
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) a[size_t(i)] = dist(rng), b[size_t(i)] = dist(rng);
  DevTensor da = upload_f32(a, {n}), db = upload_f32(b, {n}), dout(DType::f32, {n});
  dout.poison();
  backend().add(da.t, db.t, dout.t);
  auto out = download_f32(dout);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[size_t(i)], a[size_t(i)] + b[size_t(i)]) << i;
}

TEST(CudaElementwise, ConvertRoundsToNearestEven) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t n = 4099;
  std::uniform_real_distribution<float> dist(-100.f, 100.f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  x[0] = bits_to_f32(0x3f808000u);  // exact tie between two bf16 values: rounds to even
  x[1] = bits_to_f32(0x3f818000u);
  DevTensor dx = upload_f32(x, {n}), db(DType::bf16, {n}), dh(DType::f16, {n}), dback(DType::f32, {n});
  db.poison();
  dh.poison();
  backend().convert(dx.t, db.t);
  backend().convert(dx.t, dh.t);
  auto b = download_bf16(db);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[size_t(i)], round_bf16(x[size_t(i)])) << i;
  std::vector<f16_t> h(static_cast<size_t>(n));
  backend().download(dh.t, h.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[size_t(i)].bits, f32_to_f16(x[size_t(i)]).bits) << i;
  dback.poison();
  backend().convert(db.t, dback.t);
  auto back = download_f32(dback);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[size_t(i)], b[size_t(i)]) << i;
}

TEST(CudaElementwise, EmbeddingBf16AndF32Tables) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t vocab = 1003, hidden = 4099, tokens = 37;
  auto table = random_bf16_values(rng, size_t(vocab * hidden));
  std::vector<int32_t> ids(tokens);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  for (auto& i : ids) i = pick(rng);
  ids[3] = int32_t(vocab - 1);
  DevTensor dids = upload_i32(ids, {tokens}), dtab = upload_bf16(table, {vocab, hidden}), dout(DType::bf16, {tokens, hidden});
  dout.poison();
  backend().embedding(dids.t, dtab.t, dout.t);
  auto out = download_bf16(dout);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < hidden; ++c)
      ASSERT_EQ(out[size_t(t * hidden + c)], table[size_t(ids[size_t(t)] * hidden + c)]) << t << "," << c;
  // f32 table: rounded to bf16 on the way out.
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> tf(static_cast<size_t>(vocab * 8));
  for (auto& v : tf) v = dist(rng);
  DevTensor dtf = upload_f32(tf, {vocab, 8}), dout2(DType::bf16, {tokens, 8});
  dout2.poison();
  backend().embedding(dids.t, dtf.t, dout2.t);
  auto out2 = download_bf16(dout2);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < 8; ++c) ASSERT_EQ(out2[size_t(t * 8 + c)], round_bf16(tf[size_t(ids[size_t(t)] * 8 + c)]));
}

TEST(CudaElementwise, GatherRowsAnyWidth) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int64_t width : {4099, 4096, 3}) {
    const int64_t src = 53, rows = 19;
    auto x = random_bf16_values(rng, size_t(src * width));
    std::vector<int32_t> index(rows);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(src - 1));
    for (auto& i : index) i = pick(rng);
    DevTensor dx = upload_bf16(x, {src, width}), di = upload_i32(index, {rows}), dout(DType::bf16, {rows, width});
    dout.poison();
    backend().gather_rows(dx.t, di.t, dout.t);
    auto out = download_bf16(dout);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c)
        ASSERT_EQ(out[size_t(r * width + c)], x[size_t(index[size_t(r)] * width + c)]) << r << "," << c;
  }
}

TEST(CudaElementwise, ArgmaxLowestIndexWinsTies) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t rows = 9, cols = 151937;
  auto x = random_bf16_values(rng, size_t(rows * cols), -8.f, 8.f);
  std::uniform_int_distribution<int64_t> pick(0, cols - 1);
  for (int64_t r = 0; r < rows; ++r) {
    // Plant a tied maximum at two places (the later one first in memory order of some threads).
    int64_t a = pick(rng), b = pick(rng);
    x[size_t(r * cols + a)] = 9.f;
    x[size_t(r * cols + b)] = 9.f;
  }
  std::vector<int32_t> expect(rows);
  for (int64_t r = 0; r < rows; ++r) {
    auto begin = x.begin() + r * cols;
    expect[size_t(r)] = int32_t(std::max_element(begin, begin + cols) - begin);  // first maximum
  }
  DevTensor dx = upload_bf16(x, {rows, cols}), dout(DType::i32, {rows});
  dout.poison();
  backend().argmax(dx.t, dout.t);
  EXPECT_EQ(download_i32(dout), expect);
  // f32 input.
  std::vector<float> xf(static_cast<size_t>(3 * 4099));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& v : xf) v = dist(rng);
  std::vector<int32_t> expf(3);
  for (int r = 0; r < 3; ++r) {
    auto begin = xf.begin() + r * 4099;
    expf[size_t(r)] = int32_t(std::max_element(begin, begin + 4099) - begin);
  }
  DevTensor dxf = upload_f32(xf, {3, 4099}), doutf(DType::i32, {3});
  doutf.poison();
  backend().argmax(dxf.t, doutf.t);
  EXPECT_EQ(download_i32(doutf), expf);
}

// The argmax on clusters of 2, 4 and 8 blocks a row (each block a contiguous share, rank 0 reducing)
// against the first maximum on the host: ties planted in different blocks' shares, a NaN row (NaN is
// the largest), a row of -inf (index 0), 16-byte aligned rows (151,936 bf16) and unaligned ones
// (151,937), f32 rows, and the rule's choice at 1, 9, 40 and 100 rows.
TEST(CudaElementwise, ArgmaxClusterRowsKeepWinner) {
  RILL_REQUIRE_GPU();
  if (backend().info().cc_major < 9) GTEST_SKIP() << "clusters need sm_90";
  struct Restore {
    ~Restore() { cuda::set_argmax_cluster(cuda::parse_argmax_cluster(std::getenv("RILL_ARGMAX_CLUSTER"))); }
  } restore;
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  auto first_max = [](const std::vector<float>& x, int64_t r, int64_t cols) {
    const float* row = x.data() + r * cols;
    int32_t best = 0;
    for (int64_t c = 0; c < cols; ++c) {
      if (row[c] != row[c]) return int32_t(c);  // the first NaN
      if (row[c] > row[best]) best = int32_t(c);
    }
    return best;
  };
  for (const int64_t cols : {int64_t(151936), int64_t(151937), int64_t(4099)}) {
    for (const int64_t rows : {int64_t(1), int64_t(9), int64_t(40), int64_t(100)}) {
      SCOPED_TRACE(testing::Message() << rows << " rows of " << cols);
      auto x = random_bf16_values(rng, size_t(rows * cols), -8.f, 8.f);
      std::uniform_int_distribution<int64_t> pick(0, cols - 1);
      for (int64_t r = 0; r < rows; ++r) {
        // A tie between the first and the last eighth of the row (two blocks' shares), and a third
        // anywhere.
        const int64_t a = pick(rng) % (cols / 8), b = cols - 1 - pick(rng) % (cols / 8), c = pick(rng);
        for (int64_t i : {a, b, c}) x[size_t(r * cols + i)] = 9.f;
      }
      if (rows > 2) {
        x[size_t(1 * cols + cols / 2)] = std::numeric_limits<float>::quiet_NaN();
        std::fill(x.begin() + 2 * cols, x.begin() + 3 * cols, -std::numeric_limits<float>::infinity());
      }
      std::vector<int32_t> expect(size_t(rows), 0);
      for (int64_t r = 0; r < rows; ++r) expect[size_t(r)] = first_max(x, r, cols);
      std::vector<float> xf = x;
      DevTensor dx = upload_bf16(x, {rows, cols}), dxf = upload_f32(xf, {rows, cols}), dout(DType::i32, {rows});
      for (const int forced : {-1, 0, 2, 4, 8}) {
        SCOPED_TRACE(testing::Message() << "blocks a row " << forced << " (rule: "
                                        << cuda::argmax_cluster_for(rows, -1, backend().info().num_sms)
                                        << ")");
        cuda::set_argmax_cluster(forced);
        dout.poison();
        backend().argmax(dx.t, dout.t);
        EXPECT_EQ(download_i32(dout), expect) << "bf16";
        dout.poison();
        backend().argmax(dxf.t, dout.t);
        EXPECT_EQ(download_i32(dout), expect) << "f32";
      }
    }
  }
}

TEST(CudaElementwise, SoftmaxF32Out) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t rows = 5, cols = 4099;
  auto x = random_bf16_values(rng, size_t(rows * cols), -20.f, 20.f);
  DevTensor dx = upload_bf16(x, {rows, cols}), dout(DType::f32, {rows, cols});
  dout.poison();
  backend().softmax(dx.t, dout.t);
  auto out = download_f32(dout);
  std::vector<double> ref(out.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, double(x[size_t(r * cols + c)]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(double(x[size_t(r * cols + c)]) - m);
    for (int64_t c = 0; c < cols; ++c) ref[size_t(r * cols + c)] = std::exp(double(x[size_t(r * cols + c)]) - m) / s;
  }
  EXPECT_LT(rel_error(out, ref), 1e-5);
}

}  // namespace
}  // namespace rill
