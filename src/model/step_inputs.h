// model/step_inputs.h — uploads a StepBatch's per-step metadata (token ids, positions, block
// tables, ...) into a model's step arena. Shared by every family so arena sizing and the
// AttentionBatch layout live in one place. The parts are packed into one arena tensor and sent
// with one host→device copy.
#pragma once

#include <vector>

#include "core/buffer.h"
#include "kernels/kernels.h"
#include "model/step_batch.h"

namespace rill {

/// Bytes of arena the step's metadata takes (each part rounded up to 256 bytes).
size_t step_metadata_bytes(const StepBatch& batch);

struct StepInputs {
  AttentionBatch attention;
  Tensor ids;           ///< i32 [T]
  Tensor logit_index;   ///< i32 [R]: batch.logit_indices
};

/// Uploads ids, the attention layout and the logit indices of `batch` into one tensor from
/// `arena`. `scratch` is the host staging vector (reused across steps so a step allocates nothing).
StepInputs upload_step_inputs(Kernels& kernels, Arena& arena, const StepBatch& batch, std::vector<int32_t>& scratch);
StepInputs upload_step_inputs(Kernels& kernels, Arena& arena, const StepBatch& batch);

}  // namespace rill
