// core/dtype.h — element types and exact conversions between f32 and the 16-bit floats.
// f32→bf16 and f32→f16 round to nearest even (NaN stays NaN), matching torch's casts.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace rill {

enum class DType : uint8_t { f32, f16, bf16, i32, i8, u8 };

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: return 1;
  }
  return 0;
}

/// Lower-case name ("bf16").
std::string_view dtype_name(DType t);

/// Parses a name as written in safetensors headers ("BF16", "F32") or in lower case.
/// Returns false when the name is not a dtype rill supports.
bool parse_dtype(std::string_view name, DType& out);

/// bfloat16 storage: the upper half of an IEEE f32.
struct bf16_t {
  uint16_t bits;
};
/// IEEE half storage.
struct f16_t {
  uint16_t bits;
};

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_f32(bf16_t h) { return bits_to_f32(uint32_t(h.bits) << 16); }

/// Round to nearest even; NaN maps to a quiet NaN with the sign kept.
inline bf16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{uint16_t((u >> 16) | 0x0040u)};
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{uint16_t((u + rounding) >> 16)};
}

/// Rounds f to the nearest bf16 and back (what a bf16 store then load does).
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(f16_t h);
/// Round to nearest even, overflow to ±inf, subnormals exact.
f16_t f32_to_f16(float f);

}  // namespace rill
