// model/random_model.h — deterministic random-weight models of named shapes (qwen3-tiny,
// qwen3-0.6b, qwen3-8b, llama3-8b; the Qwen3.5 hybrids qwen3.5-9b and qwen3.5-tiny) in bf16
// safetensors with config.json, for benchmarks, demos and tests. The same shape and seed always
// give the same bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rill {

/// The shape names make_random_model() accepts.
std::vector<std::string> random_model_shapes();

struct RandomModelOptions {
  std::string shape;
  std::filesystem::path out_dir;
  std::optional<std::filesystem::path> tokenizer_dir;  ///< copies tokenizer.json etc. and takes eos/bos from it
  uint64_t seed = 0;
  /// Called with (bytes written, total bytes) as tensors are written.
  std::function<void(size_t, size_t)> progress;
};

/// Writes config.json, generation_config.json, model.safetensors (or shards + index above
/// 4 GiB) and, when asked, the tokenizer files. Throws rill::Error on a bad shape name,
/// an unusable tokenizer directory or an I/O failure.
void make_random_model(const RandomModelOptions& options);

}  // namespace rill
