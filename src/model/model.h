// model/model.h — the Model interface every family implements, and load_model().
// A model owns its weights (views into the mapped files or device copies) and a per-step
// arena; it does not own the KV cache (the caller passes the layers' block pools).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>

#include "kernels/kernels.h"
#include "model/config.h"
#include "model/kv_buffers.h"
#include "model/step_batch.h"

namespace rill {

struct LoadOptions {
  /// Weight dtype on the device; nullopt: on the CPU the file's (f16 widened to f32), on a GPU
  /// the activation dtype (bf16).
  std::optional<DType> weight_dtype;
  /// Progress lines while loading (to the log).
  bool verbose = true;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  /// Shape of the KV cache this model needs (per attention layer).
  virtual KvSpec kv_spec() const = 0;
  /// Runs one step over `batch`, reading and appending K/V in `cache` (one KvLayer per layer).
  /// Returns logits [batch.logit_indices.size(), vocab_size] in the activation dtype on the
  /// device, valid until the next forward().
  virtual Tensor forward(const StepBatch& batch, std::span<KvLayer> cache) = 0;
  virtual Kernels& kernels() = 0;
  /// Bytes of weights resident on the device.
  virtual size_t weight_bytes() const = 0;
};

/// Reads config.json, picks the family from `architectures`, maps and checks every weight.
/// Throws rill::Error naming the file, field or tensor on any problem.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Kernels& kernels, const LoadOptions& options = {});

/// The architectures load_model() accepts.
std::span<const char* const> supported_architectures();

}  // namespace rill
