// model/model.h — the Model interface every family implements, and load_model().
// A model owns its weights (views into the mapped files or device copies) and a per-step
// arena; it does not own the KV cache (the caller passes the layers' block pools).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>

#include "core/error.h"
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
  /// Decode steps through captured step graphs where the backend has them (CUDA). The
  /// environment variable RILL_CUDA_GRAPHS=0 turns them off too.
  bool cuda_graphs = true;
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
  /// Whether forward() takes its first ids from StepBatch::token_source (the ids a previous step
  /// drew, left on the device); a model that does not refuses a batch that sets it.
  virtual bool accepts_token_source() const { return false; }
  /// Whether forward() waits for the device (host-side MoE routing reads the router's output):
  /// its steps cannot be queued behind the previous one, so the engine does not overlap them.
  virtual bool forward_waits_for_device() const { return false; }

  // ---- Recurrent state (hybrid models: the conv and recurrent state of linear-attention layers).
  // A slot holds one sequence's state; StepBatch::state_slots names each row's slot. The defaults
  // describe a model without state (the engine then needs no slots and no snapshots).

  /// Bytes of state one sequence holds over all layers (0: no recurrent state).
  virtual size_t state_bytes_per_sequence() const { return 0; }
  /// Allocates slots [0, n) now, so that StepBatch::state_slots may name any of them.
  virtual void reserve_state_slots(int32_t /*n*/) {}
  /// Copies slot's state into `snapshot` (device memory of state_bytes_per_sequence() bytes) and
  /// returns the number of tokens that state has consumed.
  virtual int64_t save_state(int32_t /*slot*/, Tensor& /*snapshot*/) {
    fail("[save_state] this model has no recurrent state");
  }
  /// Loads `snapshot` (from save_state) into `slot`, as the state after `position` tokens: the
  /// slot's next row must start at `position`.
  virtual void restore_state(int32_t /*slot*/, const Tensor& /*snapshot*/, int64_t /*position*/) {
    fail("[restore_state] this model has no recurrent state");
  }
  /// Copies slot `from`'s state (and position) to slot `to` (n > 1 sequences forked from one prompt).
  virtual void copy_state(int32_t /*from*/, int32_t /*to*/) { fail("[copy_state] this model has no recurrent state"); }
  /// Forgets slot's state: its next row must start at position 0.
  virtual void release_state(int32_t /*slot*/) {}
};

/// Reads config.json, picks the family from `architectures`, maps and checks every weight.
/// Throws rill::Error naming the file, field or tensor on any problem.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Kernels& kernels, const LoadOptions& options = {});

/// The architectures load_model() accepts.
std::span<const char* const> supported_architectures();

}  // namespace rill
