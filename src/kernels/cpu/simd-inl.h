// kernels/cpu/simd-inl.h — Highway helpers shared by the CPU kernels, compiled once per target.
// Include after "hwy/highway.h" inside a foreach_target translation unit (the toggle guard below
// re-enables it for each target). bf16 is handled as raw uint16_t bits.

#if defined(RILL_KERNELS_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RILL_KERNELS_CPU_SIMD_INL_H_
#undef RILL_KERNELS_CPU_SIMD_INL_H_
#else
#define RILL_KERNELS_CPU_SIMD_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace rill::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

/// One vector of f32 weights, from f32 or from bf16 bits (exact: bf16 is the upper half of f32).
HWY_INLINE VF LoadW(DF df, const float* HWY_RESTRICT p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadW(DF df, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> d32;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p))));
}
HWY_INLINE float ScalarW(const float* p) { return *p; }
HWY_INLINE float ScalarW(const uint16_t* p) {
  const uint32_t u = uint32_t(*p) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if HWY_TARGET != HWY_SCALAR
template <class D, class V>
HWY_INLINE void FoldBlocks(D d, V v, float* HWY_RESTRICT out) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    FoldBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)), out);
  } else {
    hn::StoreU(v, d, out);
  }
}
#endif

/// out[0..4) = the lane sums of a, b, c, d, by one fixed addition tree per target (pairs of lanes
/// within each 128-bit block, then the blocks folded in halves). Each sum depends only on its own
/// vector, so callers may group outputs freely without changing results.
HWY_INLINE void SumOfLanes4(DF df, VF a, VF b, VF c, VF d, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a);
  out[1] = hn::GetLane(b);
  out[2] = hn::GetLane(c);
  out[3] = hn::GetLane(d);
#else
  const hn::RepartitionToWide<DF> dw;
  const VF ab = hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));
  const VF cd = hn::Add(hn::InterleaveLower(df, c, d), hn::InterleaveUpper(df, c, d));
  const auto ab_w = hn::BitCast(dw, ab);
  const auto cd_w = hn::BitCast(dw, cd);
  const VF abcd = hn::Add(hn::BitCast(df, hn::InterleaveLower(dw, ab_w, cd_w)),
                          hn::BitCast(df, hn::InterleaveUpper(dw, ab_w, cd_w)));
  FoldBlocks(df, abcd, out);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace rill::cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
