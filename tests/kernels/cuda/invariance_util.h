// Helpers of the CUDA invariance tests (invariance_*_test.cpp): bitwise comparisons, a GEMM launch's
// arguments without a workspace, and a timer over launches that start with L2 overwritten.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

namespace rill::cuda_test {

inline bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// The elements of a and b (same size) whose bits differ.
inline size_t differing_bits(const std::vector<float>& a, const std::vector<float>& b) {
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return differ;
}

// Arguments of one invariant GEMM launch with no workspace (the fold schedule) unless set later.
// A GEMM setting held for a scope, then restored.
template <int (*Get)(), void (*Set)(int)>
struct ScopedMode {
  int saved = Get();
  explicit ScopedMode(int mode) { Set(mode); }
  ~ScopedMode() { Set(saved); }
  ScopedMode(const ScopedMode&) = delete;
  ScopedMode& operator=(const ScopedMode&) = delete;
};
// The persistent warpgroup GEMM in multicast pairs, and its stream schedule: 0 never, 1 wherever it can
// run (-1: the rule).
using MulticastMode = ScopedMode<cuda::gemm_multicast, cuda::set_gemm_multicast>;
using StreamMode = ScopedMode<cuda::gemm_stream, cuda::set_gemm_stream>;

inline cuda::GemmArgs plain_gemm(const void* x, const void* w, const void* bias, void* y, int64_t m, int64_t n,
                                 int64_t k, int config = 0) {
  cuda::GemmArgs a = backend().matmul_engine().gemm_args(x, w, bias, m, n, k);
  a.workspace = nullptr;
  a.workspace_bytes = 0;
  a.counters = nullptr;
  a.num_counters = 0;
  a.y = y;
  a.config = config;
  return a;
}

// Launch timing for the printed measurements: fn once untimed, then the median of 15 timed runs,
// L2 overwritten (256 MB written) before each, in microseconds.
class ColdTimer {
 public:
  template <class Fn>
  double operator()(Fn&& fn) {
    fn();
    std::vector<float> t;
    for (int r = 0; r < 15; ++r) {
      cudaMemsetAsync(flush_.t.data(), r, flush_.t.nbytes(), backend().stream());
      start_.record(backend().stream());
      fn();
      stop_.record(backend().stream());
      stop_.synchronize();
      t.push_back(cuda::Event::elapsed_ms(start_, stop_) * 1e3f);
    }
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  }
  void* flush_data() { return flush_.t.data(); }
  size_t flush_bytes() const { return flush_.t.nbytes(); }

 private:
  DevTensor flush_{DType::u8, {int64_t(256) << 20}};
  cuda::Event start_ = cuda::Event::create(), stop_ = cuda::Event::create();
};

}  // namespace rill::cuda_test
