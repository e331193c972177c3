// core/dtype.cpp — names and the f16 conversions (bit-exact, round to nearest even).
#include "core/dtype.h"

#include <cctype>
#include <string>

namespace rill {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType& out) {
  std::string s;
  for (char c : name) s.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  if (s == "f32" || s == "float32") out = DType::f32;
  else if (s == "f16" || s == "float16") out = DType::f16;
  else if (s == "bf16" || s == "bfloat16") out = DType::bf16;
  else if (s == "i32" || s == "int32") out = DType::i32;
  else if (s == "i8" || s == "int8") out = DType::i8;
  else if (s == "u8" || s == "uint8") out = DType::u8;
  else return false;
  return true;
}

float f16_to_f32(f16_t h) {
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    // Subnormal: value = mant * 2^-24, exactly representable in f32.
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

f16_t f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16_t{uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};  // NaN
  if (a >= 0x477ff000u) return f16_t{uint16_t(sign | 0x7c00u)};  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24 rounded to nearest even.
    // Adding 0.5f (2^-1) aligns the mantissa so the FPU's own RNE does the rounding.
    float magnitude = bits_to_f32(a);
    float shifted = magnitude + 0.5f;
    uint32_t bits = f32_to_bits(shifted) - 0x3f000000u;
    return f16_t{uint16_t(sign | bits)};
  }
  uint32_t mant_odd = (a >> 13) & 1u;
  a += 0xc8000fffu + mant_odd;  // rebias exponent (−112 << 23) and round to nearest even
  return f16_t{uint16_t(sign | (a >> 13))};
}

}  // namespace rill
