// kernels/linear_attention_defaults.cpp — default bodies of the Gated DeltaNet ops of Kernels.
// They throw so that a backend that does not implement them (the CPU and CUDA backends do) still
// builds and fails loudly and by name if a hybrid model is run on it.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"

namespace rill {

void Kernels::causal_conv1d(const Tensor&, const Tensor&, const StateBatch&, Tensor&, Tensor&, bool) {
  fail("[causal_conv1d] not implemented on this backend");
}
void Kernels::gated_delta_rule(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const StateBatch&, Tensor&, Tensor&, const DeltaRuleParams&) {
  fail("[gated_delta_rule] not implemented on this backend");
}
void Kernels::l2_norm(const Tensor&, float, float, Tensor&) { fail("[l2_norm] not implemented on this backend"); }
void Kernels::gated_rms_norm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) {
  fail("[gated_rms_norm] not implemented on this backend");
}
void Kernels::gdn_gates(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  fail("[gdn_gates] not implemented on this backend");
}
void Kernels::sigmoid_mul(const Tensor&, const Tensor&, Tensor&) { fail("[sigmoid_mul] not implemented on this backend"); }

// Used for recurrent-state snapshots; staged through the host unless the backend copies on the device.
void Kernels::copy(const Tensor& src, Tensor& dst) {
  RILL_ENSURE(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "[copy] src {} and dst {} differ",
              src.describe(), dst.describe());
  std::vector<uint8_t> host(src.nbytes());
  download(src, host.data());
  upload(host.data(), dst);
}

}  // namespace rill
