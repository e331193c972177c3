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
/// inside the model, keyed by StepBatch::state_slots when given, else by each row's first KV block id;
/// a row starting at position 0 resets its state, and a row must continue exactly where its state
/// stopped (else rill::Error): prefix-cache hits cannot restore GDN state until the engine's
/// StatePool snapshots exist, so hybrid models need prefix caching off for now.
std::unique_ptr<Model> load_qwen3_5(const std::filesystem::path& dir, Kernels& kernels, const LoadOptions& options);

}  // namespace rill
