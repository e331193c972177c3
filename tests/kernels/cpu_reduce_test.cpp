// CPU argmax (ties, NaN, infinities) and softmax (against double, long rows) plus the backend
// basics: device, activation dtype, upload/download round trip, readback.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

using test::rel_error;

TEST(CpuReduce, ArgmaxTiesNanAndInfinity) {
  auto kern = make_cpu_kernels();
  const float inf = INFINITY;
  std::vector<std::vector<float>> rows = {
      {1.f, 3.f, 3.f, 2.f},       // tie: lowest index (1)
      {NAN, -5.f, NAN, -4.f},     // NaN never wins (3)
      {NAN, NAN, NAN, NAN},       // all NaN: 0
      {-inf, -inf, -inf, -inf},   // all -inf: 0
      {0.f, inf, NAN, inf},       // +inf wins, first one (1)
      {-1.f, -2.f, -3.f, -0.5f},  // (3)
  };
  std::vector<int32_t> expected = {1, 3, 0, 0, 1, 3};
  std::vector<float> x;
  for (auto& r : rows) x.insert(x.end(), r.begin(), r.end());
  std::vector<int32_t> out(rows.size(), -1);
  Tensor ot(out.data(), DType::i32, {int64_t(rows.size())});
  kern->argmax(Tensor(x.data(), DType::f32, {int64_t(rows.size()), 4}), ot);
  EXPECT_EQ(out, expected);

  std::mt19937 rng(test::test_seed(50));
  const int64_t R = 5, V = 151936;
  std::vector<float> big = test::random_floats(rng, size_t(R * V), -20.f, 20.f);
  std::vector<int32_t> want(R);
  for (int64_t r = 0; r < R; ++r) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i) {
      if (big[r * V + i] > big[r * V + best]) best = i;
    }
    want[r] = int32_t(best);
  }
  std::vector<int32_t> got(R);
  Tensor gt(got.data(), DType::i32, {R});
  kern->argmax(Tensor(big.data(), DType::f32, {R, V}), gt);
  EXPECT_EQ(got, want);
  Tensor bad(got.data(), DType::i32, {R - 1});
  test::expect_op_error("argmax", [&] { kern->argmax(Tensor(big.data(), DType::f32, {R, V}), bad); });
}

TEST(CpuReduce, SoftmaxMatchesReference) {
  auto kern = make_cpu_kernels();
  const uint32_t seed = test::test_seed(51);
  std::mt19937 rng(seed);
  for (int64_t R : {1, 3}) {
    for (int64_t V : {1, 7, 4099, 151936}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " R " << R << " V " << V);
      std::vector<float> x = test::random_floats(rng, size_t(R * V), -30.f, 30.f);
      x[0] = 95.f;  // exp would overflow without subtracting the max
      if (V > 1) x[1] = -INFINITY;  // a masked logit gets exactly 0
      std::vector<double> ref(x.size());
      for (int64_t r = 0; r < R; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(x[r * V + i]));
        for (int64_t i = 0; i < V; ++i) sum += std::exp(double(x[r * V + i]) - mx);
        for (int64_t i = 0; i < V; ++i) ref[r * V + i] = std::exp(double(x[r * V + i]) - mx) / sum;
      }
      std::vector<float> out(x.size());
      Tensor ot(out.data(), DType::f32, {R, V});
      kern->softmax(Tensor(x.data(), DType::f32, {R, V}), ot);
      EXPECT_LE(rel_error(out, ref), 1e-6);
      if (V > 1) {
        EXPECT_EQ(out[1], 0.f);
      }
    }
  }
}

TEST(CpuBackend, DeviceAndTransfers) {
  auto kern = make_cpu_kernels();
  EXPECT_EQ(kern->device(), Device::cpu);
  EXPECT_EQ(kern->activation_dtype(), DType::f32);
  EXPECT_EQ(kern->allocator().device(), Device::cpu);
  Buffer buf(kern->allocator(), 16 * sizeof(float));
  Tensor t = buf.as(DType::f32, {4, 4});
  std::vector<float> host(16), back(16, 0.f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) * 0.5f;
  kern->upload(host.data(), t);
  kern->synchronize();
  kern->download(t, back.data());
  EXPECT_EQ(host, back);
}

// The CPU readback copies in start(): its bytes are the tensor's at that moment; an oversized
// source and wait() before start() are refused.
TEST(CpuBackend, ReadbackCopiesAtStart) {
  auto kern = make_cpu_kernels();
  Buffer buf(kern->allocator(), 4 * sizeof(int32_t));
  Tensor t = buf.as(DType::i32, {4});
  std::unique_ptr<Readback> rb = kern->make_readback(4 * sizeof(int32_t));
  EXPECT_EQ(rb->capacity(), 4 * sizeof(int32_t));
  EXPECT_THROW(rb->wait(), Error);
  std::vector<int32_t> host{1, 2, 3, 4}, later{5, 6, 7, 8};
  kern->upload(host.data(), t);
  rb->start(t);
  kern->upload(later.data(), t);
  const auto* got = static_cast<const int32_t*>(rb->wait());
  EXPECT_EQ(std::vector<int32_t>(got, got + 4), host);
  Buffer big(kern->allocator(), 5 * sizeof(int32_t));
  EXPECT_THROW(rb->start(big.as(DType::i32, {5})), Error);
}

}  // namespace
}  // namespace rill
