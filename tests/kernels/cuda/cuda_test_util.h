// tests/kernels/cuda/cuda_test_util.h — helpers for the CUDA kernel tests: one shared backend,
// device tensors built from host vectors, NaN-poisoned outputs, fresh random bf16-exact inputs
// and the relative-error metric against double-precision references (NaN never passes).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

namespace rill::cuda_test {

/// The backend shared by every test of the binary (created on first use).
inline cuda::CudaKernels& backend() {
  static std::unique_ptr<cuda::CudaKernels> k = std::make_unique<cuda::CudaKernels>(0);
  return *k;
}

#define RILL_REQUIRE_GPU() \
  if (!::rill::cuda_available()) GTEST_SKIP() << "no CUDA GPU"

/// A device tensor that owns its memory.
struct DevTensor {
  Buffer buffer;
  Tensor t;
  DevTensor() = default;
  DevTensor(DType dtype, std::vector<int64_t> shape) {
    Tensor probe(nullptr, dtype, std::span<const int64_t>(shape), Device::cuda);
    buffer = Buffer(backend().allocator(), std::max<size_t>(probe.nbytes(), 16));
    t = buffer.as(dtype, std::span<const int64_t>(shape));
  }
  /// Fills every byte with 0xff: NaN for f32/bf16/f16, -1 for i32.
  void poison() {
    if (cudaMemsetAsync(t.data(), 0xff, t.nbytes(), backend().stream()) != cudaSuccess)
      ADD_FAILURE() << "cudaMemsetAsync failed";
  }
};

inline uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

/// Uniform values in [lo, hi) already rounded to bf16 (so host and device see the same inputs).
inline std::vector<float> random_bf16_values(std::mt19937_64& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(dist(rng));
  return v;
}

inline std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

inline DevTensor upload_bf16(const std::vector<float>& v, std::vector<int64_t> shape) {
  DevTensor d(DType::bf16, std::move(shape));
  auto h = to_bf16(v);
  backend().upload(h.data(), d.t);
  return d;
}

inline DevTensor upload_f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  DevTensor d(DType::f32, std::move(shape));
  backend().upload(v.data(), d.t);
  return d;
}

inline DevTensor upload_i32(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  DevTensor d(DType::i32, std::move(shape));
  backend().upload(v.data(), d.t);
  return d;
}

inline std::vector<float> download_bf16(const DevTensor& d) {
  std::vector<bf16_t> h(size_t(d.t.numel()));
  backend().download(d.t, h.data());
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = bf16_to_f32(h[i]);
  return out;
}

inline std::vector<float> download_f32(const DevTensor& d) {
  std::vector<float> h(size_t(d.t.numel()));
  backend().download(d.t, h.data());
  return h;
}

inline std::vector<int32_t> download_i32(const DevTensor& d) {
  std::vector<int32_t> h(size_t(d.t.numel()));
  backend().download(d.t, h.data());
  return h;
}

/// ‖out − ref‖ / ‖ref‖; +inf when any output is NaN/inf or the sizes differ.
inline double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    double d = double(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// Fraction of outputs bit-equal (as bf16) to a reference that emulates the kernel's roundings.
inline double exact_fraction(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size() || out.empty()) return 0;
  size_t same = 0;
  for (size_t i = 0; i < out.size(); ++i) same += f32_to_bf16(out[i]).bits == f32_to_bf16(ref[i]).bits;
  return double(same) / double(out.size());
}

}  // namespace rill::cuda_test
