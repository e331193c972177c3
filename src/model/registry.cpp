// model/registry.cpp — the explicit list of model families: architecture name → loader.
#include <array>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "model/llama.h"
#include "model/model.h"
#include "model/qwen3_5.h"

namespace rill {
namespace {
constexpr std::array<const char*, 8> kArchitectures = {
    "LlamaForCausalLM",   "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"};
}

std::span<const char* const> supported_architectures() { return kArchitectures; }

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Kernels& kernels, const LoadOptions& options) {
  if (is_qwen3_5(dir)) return load_qwen3_5(dir, kernels, options);
  ModelConfig config = ModelConfig::load(dir);
  bool known = false;
  for (const char* a : kArchitectures) known = known || config.architecture == a;
  if (!known) {
    std::string list;
    for (const char* a : kArchitectures) list += std::string(list.empty() ? "" : ", ") + a;
    fail("{}: architecture '{}' is not supported (supported: {})", config.path.string(), config.architecture, list);
  }
  auto store = std::make_unique<WeightStore>(dir);
  return make_llama_family(std::move(config), std::move(store), kernels, options);
}

}  // namespace rill
