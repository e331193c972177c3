// kernels/cpu/reduce.cpp — row reductions over logits: argmax and softmax (f32 in, per row).
// argmax: NaN counts as smaller than every number, so a NaN never wins over a real value and a
// row of only NaNs yields 0; ties go to the lowest index. Softmax subtracts the row max first.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/ops.h"

namespace rill::cpu {

void argmax(const Tensor& x, Tensor& out) {
  constexpr const char* op = "argmax";
  check_tensor(op, "x", x, 2);
  check_tensor(op, "out", out, 1);
  check_dtype(op, "x", x, {DType::f32});
  check_dtype(op, "out", out, {DType::i32});
  const int64_t R = x.size(0), V = x.size(1);
  check_dim(op, "out", out, 0, R);
  RILL_ENSURE(V > 0 || R == 0, "[argmax] x: rows must not be empty, got {}", x.describe());
  RILL_ENSURE(V <= INT32_MAX, "[argmax] x: {} columns do not fit an i32 index", V);
  const float* xs = x.data_as<const float>();
  int32_t* os = out.data_as<int32_t>();
  ThreadPool::global().parallel_for(R, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = xs + r * V;
      int64_t best = 0;
      float best_v = row[0];
      for (int64_t i = 1; i < V; ++i) {
        // Strictly greater keeps the lowest index on ties; NaN compares false, and a NaN incumbent
        // (only possible at index 0) is replaced by the first real value.
        if (row[i] > best_v || (std::isnan(best_v) && !std::isnan(row[i]))) {
          best = i;
          best_v = row[i];
        }
      }
      os[r] = int32_t(best);
    }
  });
}

void softmax(const Tensor& x, Tensor& out) {
  constexpr const char* op = "softmax";
  check_tensor(op, "x", x, 2);
  check_tensor(op, "out", out, 2);
  check_dtype(op, "x", x, {DType::f32});
  check_dtype(op, "out", out, {DType::f32});
  check_same_shape(op, "x", x, "out", out);
  if (out.data() != x.data()) check_no_overlap(op, "out", out, "x", x);
  const int64_t R = x.size(0), V = x.size(1);
  const float* xs = x.data_as<const float>();
  float* os = out.data_as<float>();
  ThreadPool::global().parallel_for(R, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = xs + r * V;
      float* o = os + r * V;
      float m = -INFINITY;
      bool nan = false;
      for (int64_t i = 0; i < V; ++i) {
        nan |= std::isnan(row[i]);
        m = std::max(m, row[i]);
      }
      if (nan) m = NAN;  // NaN in, NaN out (std::max would silently skip it)
      double sum = 0.0;  // a long row of small terms: f32 would lose ~1e-5 relative
      for (int64_t i = 0; i < V; ++i) {
        o[i] = std::exp(row[i] - m);
        sum += o[i];
      }
      const float inv = float(1.0 / sum);
      for (int64_t i = 0; i < V; ++i) o[i] *= inv;
    }
  });
}

}  // namespace rill::cpu
