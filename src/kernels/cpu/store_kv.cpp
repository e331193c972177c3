// kernels/cpu/store_kv.cpp — copies each new token's K and V rows into its paged-cache slot.
// Cache layout [num_blocks, block_size, kv_heads, head_dim]: slot s is the contiguous
// kv_heads * head_dim run at s * kv_heads * head_dim. Slot -1 marks a padding token (skipped).
#include <cstring>

#include "kernels/cpu/check.h"
#include "kernels/cpu/ops.h"

namespace rill::cpu {

void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache) {
  constexpr const char* op = "store_kv";
  check_tensor(op, "k", k, 3);
  check_tensor(op, "v", v, 3);
  check_tensor(op, "slot_mapping", slot_mapping, 1);
  check_tensor(op, "cache.k", cache.k, 4);
  check_tensor(op, "cache.v", cache.v, 4);
  check_dtype(op, "k", k, {DType::f32});
  check_dtype(op, "v", v, {DType::f32});
  check_dtype(op, "slot_mapping", slot_mapping, {DType::i32});
  check_dtype(op, "cache.k", cache.k, {DType::f32});
  check_dtype(op, "cache.v", cache.v, {DType::f32});
  check_same_shape(op, "k", k, "v", v);
  check_same_shape(op, "cache.k", cache.k, "cache.v", cache.v);
  const int64_t T = k.size(0), H = k.size(1), D = k.size(2);
  check_dim(op, "slot_mapping", slot_mapping, 0, T);
  check_dim(op, "cache.k", cache.k, 2, H);
  check_dim(op, "cache.k", cache.k, 3, D);
  const int64_t num_slots = cache.k.size(0) * cache.k.size(1);
  const int32_t* slots = slot_mapping.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    RILL_ENSURE(slots[t] >= -1 && slots[t] < num_slots,
                "[store_kv] slot_mapping[{}] = {} is outside [0, {}) (and not the padding value -1)", t, slots[t],
                num_slots);
  }
  const int64_t row = H * D;
  const size_t bytes = size_t(row) * sizeof(float);
  const float* ks = k.data_as<const float>();
  const float* vs = v.data_as<const float>();
  float* kc = cache.k.data_as<float>();
  float* vc = cache.v.data_as<float>();
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    std::memcpy(kc + int64_t(slots[t]) * row, ks + t * row, bytes);
    std::memcpy(vc + int64_t(slots[t]) * row, vs + t * row, bytes);
  }
}

}  // namespace rill::cpu
