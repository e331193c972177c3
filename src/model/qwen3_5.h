// model/qwen3_5.h — Qwen3.5 hybrid decoder (Gated DeltaNet + gated full attention), dense or MoE, from
// Qwen3_5[Moe]ForConditionalGeneration (text_config; vision weights skipped) or text-only configs.
#pragma once

#include <filesystem>
#include <memory>

#include "model/model.h"

namespace rill {

/// True when config.json in `dir` names a Qwen3.5 architecture this loader handles.
bool is_qwen3_5(const std::filesystem::path& dir);

/// Loads a Qwen3.5 model (see docs/models/qwen3_5.md). Per-row recurrent and conv state is kept
/// inside the model in slots: StepBatch::state_slots names each row's slot (the engine's StatePool
/// slot ids, reserved with reserve_state_slots()); without it a row's state is keyed by its first
/// KV block id (tests that drive the model directly). A row starting at position 0 resets its
/// state, and any other row must continue exactly where its state stopped (else rill::Error), so a
/// prefix-cache hit is only possible after restore_state() put the state of that prefix in the
/// slot (the engine keeps such snapshots at block boundaries, docs/engine.md).
std::unique_ptr<Model> load_qwen3_5(const std::filesystem::path& dir, Kernels& kernels, const LoadOptions& options);

}  // namespace rill
