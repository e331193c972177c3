// kernels/cpu/elementwise.cpp — add, embedding, gather_rows and convert on the host.
// All are memory-bound single passes parallel over rows or elements; conversions use the exact
// round-to-nearest-even routines of core/dtype.h (f16 ↔ bf16 goes through f32, as torch does).
#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/cpu/check.h"
#include "kernels/cpu/ops.h"

namespace rill::cpu {
namespace {

constexpr int64_t kElementGrain = 1 << 15;

// Out may be the same memory as `in`, or disjoint from it (a shifted overlap is rejected).
void check_same_or_disjoint(const char* op, const char* out_name, const Tensor& out, const char* in_name,
                            const Tensor& in) {
  if (out.data() == in.data()) return;
  check_no_overlap(op, out_name, out, in_name, in);
}

float load_as_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const bf16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const f16_t*>(p)[i]);
    default: RILL_CHECK(false, "load_as_f32 of {}", dtype_name(t));
  }
  return 0.f;
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  constexpr const char* op = "add";
  RILL_ENSURE(a.defined() && b.defined() && out.defined(), "[add] a, b and out must be defined");
  check_tensor(op, "a", a, a.ndim());
  check_tensor(op, "b", b, b.ndim());
  check_tensor(op, "out", out, out.ndim());
  check_dtype(op, "a", a, {DType::f32});
  check_dtype(op, "b", b, {DType::f32});
  check_dtype(op, "out", out, {DType::f32});
  check_same_shape(op, "a", a, "b", b);
  check_same_shape(op, "a", a, "out", out);
  check_same_or_disjoint(op, "out", out, "a", a);
  check_same_or_disjoint(op, "out", out, "b", b);
  const float* as = a.data_as<const float>();
  const float* bs = b.data_as<const float>();
  float* os = out.data_as<float>();
  ThreadPool::global().parallel_for(a.numel(), kElementGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) os[i] = as[i] + bs[i];
  });
}

void embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  constexpr const char* op = "embedding";
  check_tensor(op, "ids", ids, 1);
  check_tensor(op, "table", table, 2);
  check_tensor(op, "out", out, 2);
  check_dtype(op, "ids", ids, {DType::i32});
  check_dtype(op, "table", table, {DType::f32, DType::bf16});
  check_dtype(op, "out", out, {DType::f32});
  const int64_t T = ids.size(0), V = table.size(0), H = table.size(1);
  RILL_ENSURE(out.size(0) == T && out.size(1) == H, "[embedding] out: expected [{}, {}], got {}", T, H,
              out.describe());
  const int32_t* id = ids.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t)
    RILL_ENSURE(id[t] >= 0 && id[t] < V, "[embedding] ids[{}] = {} is outside the table's [0, {})", t, id[t], V);
  float* os = out.data_as<float>();
  const void* tab = table.data();
  const DType dt = table.dtype();
  for (int64_t t = 0; t < T; ++t) {
    float* row = os + t * H;
    const int64_t base = int64_t(id[t]) * H;
    if (dt == DType::f32) {
      std::memcpy(row, static_cast<const float*>(tab) + base, size_t(H) * sizeof(float));
    } else {
      for (int64_t h = 0; h < H; ++h) row[h] = load_as_f32(tab, dt, base + h);
    }
  }
}

void gather_rows(const Tensor& x, const Tensor& index, Tensor& out) {
  constexpr const char* op = "gather_rows";
  check_tensor(op, "x", x, 2);
  check_tensor(op, "index", index, 1);
  check_tensor(op, "out", out, 2);
  check_dtype(op, "index", index, {DType::i32});
  RILL_ENSURE(out.dtype() == x.dtype(), "[gather_rows] out: expected dtype {} like x, got {}", dtype_name(x.dtype()),
              out.describe());
  const int64_t N = x.size(0), H = x.size(1), R = index.size(0);
  RILL_ENSURE(out.size(0) == R && out.size(1) == H, "[gather_rows] out: expected [{}, {}], got {}", R, H,
              out.describe());
  check_no_overlap(op, "out", out, "x", x);
  const int32_t* idx = index.data_as<const int32_t>();
  for (int64_t r = 0; r < R; ++r)
    RILL_ENSURE(idx[r] >= 0 && idx[r] < N, "[gather_rows] index[{}] = {} is outside [0, {})", r, idx[r], N);
  const size_t row_bytes = size_t(H) * dtype_size(x.dtype());
  const char* xs = static_cast<const char*>(x.data());
  char* os = static_cast<char*>(out.data());
  for (int64_t r = 0; r < R; ++r) std::memcpy(os + size_t(r) * row_bytes, xs + size_t(idx[r]) * row_bytes, row_bytes);
}

void convert(const Tensor& x, Tensor& out) {
  constexpr const char* op = "convert";
  RILL_ENSURE(x.defined() && out.defined(), "[convert] x and out must be defined");
  check_tensor(op, "x", x, x.ndim());
  check_tensor(op, "out", out, out.ndim());
  check_dtype(op, "x", x, {DType::f32, DType::bf16, DType::f16});
  check_dtype(op, "out", out, {DType::f32, DType::bf16, DType::f16});
  check_same_shape(op, "x", x, "out", out);
  if (x.dtype() == out.dtype()) {
    if (x.data() != out.data() && x.nbytes() > 0) std::memmove(out.data(), x.data(), x.nbytes());
    return;
  }
  check_no_overlap(op, "out", out, "x", x);
  const void* src = x.data();
  const DType from = x.dtype(), to = out.dtype();
  void* dst = out.data();
  ThreadPool::global().parallel_for(x.numel(), kElementGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float f = load_as_f32(src, from, i);
      if (to == DType::f32) {
        static_cast<float*>(dst)[i] = f;
      } else if (to == DType::bf16) {
        static_cast<bf16_t*>(dst)[i] = f32_to_bf16(f);
      } else {
        static_cast<f16_t*>(dst)[i] = f32_to_f16(f);
      }
    }
  });
}

}  // namespace rill::cpu
