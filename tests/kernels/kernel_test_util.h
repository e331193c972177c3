// tests/kernels/kernel_test_util.h — helpers for the kernel tests: seeded random data, host tensors,
// bf16 rounding for references, and the relative-error metric ‖out − ref‖ / ‖ref‖ (in double).
// References are written in each test in double precision; nothing here calls a kernel.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace rill::test {

/// Base seed of the random tests; RILL_TEST_SEED overrides it to replay or vary a run.
inline uint32_t test_seed(uint32_t salt) {
  const char* env = std::getenv("RILL_TEST_SEED");
  uint32_t base = env ? uint32_t(std::strtoul(env, nullptr, 10)) : 20240611u;
  return base * 2654435761u + salt;
}

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]).bits;
  return out;
}

inline std::vector<float> bf16_bits_to_f32(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bits_to_f32(uint32_t(v[i]) << 16);
  return out;
}

/// A CPU tensor view of a std::vector (the vector must outlive it).
template <typename T>
Tensor view_of(std::vector<T>& v, DType dtype, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), dtype, shape);
}

inline double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;  // NaN never passes
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

/// Runs `fn` and checks it throws rill::Error whose message starts with "[op]".
template <typename Fn>
void expect_op_error(const std::string& op, Fn&& fn) {
  try {
    fn();
    ADD_FAILURE() << "expected a rill::Error from [" << op << "]";
  } catch (const rill::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[" + op + "]", 0), 0u) << "message: " << e.what();
  }
}

}  // namespace rill::test
