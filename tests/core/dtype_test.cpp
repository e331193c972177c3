// Exact f32 <-> bf16/f16 conversions against a reference computed in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"

namespace rill {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    float f = bits_to_f32(bits(rng));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    if (std::isinf(f)) {
      EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f);
      continue;
    }
    uint32_t u = f32_to_bits(f);
    uint32_t down = u & 0xffff0000u;
    float lo = std::fabs(bits_to_f32(down)), hi = std::fabs(bits_to_f32(down + 0x10000u));
    // Past the largest bf16 the next step is 2^128 (which is +inf once rounded).
    double hi_value = std::isinf(hi) ? std::ldexp(1.0, 128) : double(hi);
    double v = std::fabs(double(f)), dlo = v - lo, dhi = hi_value - v;
    float expect = dlo < dhi ? lo : dhi < dlo ? hi : (((down >> 16) & 1) ? hi : lo);
    expect = std::copysign(expect, f);
    ASSERT_EQ(f32_to_bits(bf16_to_f32(f32_to_bf16(f))), f32_to_bits(expect)) << "f=" << f;
  }
}

TEST(DType, Bf16KnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)).bits, 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(f32_to_bf16(-2.0f).bits, 0xc000);
}

TEST(DType, F16RoundTripsEveryHalf) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    f16_t h{uint16_t(b)};
    float f = f16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f).bits, h.bits) << std::hex << b;
  }
}

TEST(DType, F16RoundsToNearestEvenOnRandomFloats) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> mag(-26, 17);
  for (int i = 0; i < 200000; ++i) {
    double v = std::ldexp(1.0, 0) * std::exp2(mag(rng)) * ((i & 1) ? -1 : 1);
    float f = float(v);
    if (std::fabs(f) >= 65504.f) continue;  // overflow is checked separately below
    f16_t h = f32_to_f16(f);
    double got = f16_to_f32(h);
    // Every other half must be no closer (ties: the even one).
    double err = std::fabs(got - double(f));
    for (int d : {-1, 1}) {
      f16_t n{uint16_t(h.bits + d)};
      double other = f16_to_f32(n);
      if (std::isnan(other) || std::isinf(other)) continue;
      double oerr = std::fabs(other - double(f));
      ASSERT_TRUE(err < oerr || (err == oerr && (h.bits & 1) == 0)) << f;
    }
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(65520.f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.f)), 65504.f);
}

TEST(DType, ParseNames) {
  DType t;
  EXPECT_TRUE(parse_dtype("BF16", t));
  EXPECT_EQ(t, DType::bf16);
  EXPECT_TRUE(parse_dtype("F32", t));
  EXPECT_EQ(t, DType::f32);
  EXPECT_FALSE(parse_dtype("F8_E4M3", t));
}

}  // namespace
}  // namespace rill
