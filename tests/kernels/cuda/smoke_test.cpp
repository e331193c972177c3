// The CUDA smoke kernel runs on a GPU and computes saxpy exactly (label cuda).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/smoke.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

TEST(CudaSmoke, Saxpy) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
  const int64_t n = 4099;
  std::vector<float> x(n), y(n), expect(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = float(i % 97) * 0.5f;
    y[i] = float(i % 13) - 6.f;
    expect[i] = 3.f * x[i] + y[i];
  }
  cuda::smoke_saxpy(n, 3.f, x.data(), y.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], expect[i]) << i;
}

}  // namespace
}  // namespace rill
