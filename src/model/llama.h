// model/llama.h — the dense decoder family: LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM (q/k/v bias) and Qwen3ForCausalLM (per-head q/k RMSNorm), chosen by config.
#pragma once

#include <memory>

#include "model/model.h"
#include "model/safetensors.h"

namespace rill {

std::unique_ptr<Model> make_llama_family(ModelConfig config, std::unique_ptr<WeightStore> store, Kernels& kernels,
                                         const LoadOptions& options);

}  // namespace rill
