// model/step_inputs.h — uploads a StepBatch's per-step metadata (token ids, positions, block
// tables, ...) into a model's step arena. Shared by every family so arena sizing and the
// AttentionBatch layout live in one place.
#pragma once

#include "core/buffer.h"
#include "kernels/kernels.h"
#include "model/step_batch.h"

namespace rill {

/// Bytes of arena the step's metadata takes (each tensor rounded up as the Arena rounds).
size_t step_metadata_bytes(const StepBatch& batch);

struct StepInputs {
  AttentionBatch attention;
  Tensor ids;  ///< i32 [T]
};

/// Uploads ids and the attention layout of `batch` into tensors from `arena`.
StepInputs upload_step_inputs(Kernels& kernels, Arena& arena, const StepBatch& batch);

}  // namespace rill
