// kernels/cpu/state_rows.h — reads a StateBatch (host-resident on the CPU backend) into row
// ranges, checking offsets and slots against the token count and the state tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"

namespace rill::cpu {

struct StateRow {
  int64_t begin = 0, end = 0;  ///< token range [begin, end)
  int64_t slot = 0;
  bool has_state = false;
};

inline std::vector<StateRow> state_rows(const char* op, const StateBatch& b, int64_t tokens, int64_t num_slots) {
  RILL_ENSURE(b.cu_seqlens.defined() && b.slots.defined() && b.has_state.defined(),
              "[{}] batch: cu_seqlens, slots and has_state must all be set", op);
  RILL_ENSURE(b.cu_seqlens.dtype() == DType::i32 && b.slots.dtype() == DType::i32 && b.has_state.dtype() == DType::i32,
              "[{}] batch: index tensors must be i32", op);
  RILL_ENSURE(b.cu_seqlens.numel() == b.num_rows + 1 && b.slots.numel() == b.num_rows &&
                  b.has_state.numel() == b.num_rows,
              "[{}] batch: {} rows need cu_seqlens [{}], slots and has_state [{}]", op, b.num_rows, b.num_rows + 1,
              b.num_rows);
  const int32_t* cu = b.cu_seqlens.data_as<int32_t>();
  const int32_t* sl = b.slots.data_as<int32_t>();
  const int32_t* hs = b.has_state.data_as<int32_t>();
  RILL_ENSURE(cu[0] == 0 && cu[b.num_rows] == tokens, "[{}] batch: cu_seqlens must run from 0 to {} (got {}..{})", op,
              tokens, cu[0], cu[b.num_rows]);
  std::vector<StateRow> rows(size_t(b.num_rows));
  for (int32_t r = 0; r < b.num_rows; ++r) {
    RILL_ENSURE(cu[r + 1] >= cu[r], "[{}] batch: cu_seqlens decreases at row {}", op, r);
    RILL_ENSURE(sl[r] >= 0 && sl[r] < num_slots, "[{}] batch: slot {} of row {} is outside [0, {})", op, sl[r], r,
                num_slots);
    for (int32_t p = 0; p < r; ++p)
      RILL_ENSURE(sl[p] != sl[r], "[{}] batch: rows {} and {} share state slot {}", op, p, r, sl[r]);
    rows[size_t(r)] = StateRow{cu[r], cu[r + 1], sl[r], hs[r] != 0};
  }
  return rows;
}

}  // namespace rill::cpu
