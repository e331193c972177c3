// model/qwen3_5_moe.h — the sparse MLP block of Qwen3.5-MoE (docs/models/qwen3_5.md, MLP / MoE):
// softmax router in f32, top-k with the weights always renormalised, SwiGLU experts, plus a shared
// expert scaled by sigmoid(h·W_sgᵀ). Routing runs on the host (a CPU-oracle implementation).
#pragma once

#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/kernels.h"
#include "model/weights.h"

namespace rill {

struct MoeSizes {
  int64_t H = 0, E = 0, k = 0, I = 0, Is = 0;  ///< hidden, experts, experts per token, expert / shared widths
};

class MoeBlock {
 public:
  /// Loads `prefix` + "mlp.*": fused experts.{gate_up_proj,down_proj} or per-expert tensors.
  void load(WeightLoader& w, const WeightStore& store, const std::string& prefix, const MoeSizes& s);
  /// delta[T,H] = routed(h) + sigmoid(h·W_sgᵀ)·shared(h); temporaries from `arena`.
  void forward(Kernels& k, Arena& arena, const Tensor& h, Tensor& delta) const;
  /// Arena bytes forward() needs for T tokens (activation dtype size `act`).
  static size_t arena_bytes(const MoeSizes& s, int64_t T, size_t act);

 private:
  MoeSizes s_;
  Tensor router_, shared_gate_up_, shared_down_, shared_gate_;
  std::vector<Tensor> gate_up_, down_;  // per expert [2I, H], [H, I]
};

}  // namespace rill
