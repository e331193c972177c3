// kernels/cpu/cpu_kernels.cpp — CpuKernels forwards each op to its free function in kernels/cpu/ops.h.
#include "kernels/cpu/cpu_kernels.h"

#include <cstring>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace rill {

std::unique_ptr<Kernels> make_cpu_kernels() { return std::make_unique<cpu::CpuKernels>(); }

namespace cpu {

void CpuKernels::upload(const void* host, Tensor dst) {
  RILL_ENSURE(dst.device() == Device::cpu, "[upload] dst: expected a CPU tensor, got {}", dst.describe());
  RILL_ENSURE(dst.is_contiguous(), "[upload] dst: expected a contiguous tensor, got {}", dst.describe());
  if (dst.nbytes() > 0) std::memcpy(dst.data(), host, dst.nbytes());
}

void CpuKernels::download(const Tensor& src, void* host) {
  RILL_ENSURE(src.device() == Device::cpu, "[download] src: expected a CPU tensor, got {}", src.describe());
  RILL_ENSURE(src.is_contiguous(), "[download] src: expected a contiguous tensor, got {}", src.describe());
  if (src.nbytes() > 0) std::memcpy(host, src.data(), src.nbytes());
}

void CpuKernels::copy(const Tensor& src, Tensor& dst) {
  RILL_ENSURE(src.device() == Device::cpu && dst.device() == Device::cpu, "[copy] expected CPU tensors, got {} and {}",
              src.describe(), dst.describe());
  RILL_ENSURE(src.is_contiguous() && dst.is_contiguous(), "[copy] expected contiguous tensors, got {} and {}",
              src.describe(), dst.describe());
  RILL_ENSURE(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "[copy] src {} and dst {} differ",
              src.describe(), dst.describe());
  if (src.nbytes() > 0) std::memmove(dst.data(), src.data(), src.nbytes());
}

void CpuKernels::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  cpu::matmul(x, w, bias, y);
}
void CpuKernels::rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) {
  cpu::rms_norm(x, w, p, y);
}
void CpuKernels::add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) {
  cpu::add_rms_norm(residual, x, w, p, y);
}
void CpuKernels::rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) {
  cpu::rope(q, k, positions, table);
}
void CpuKernels::store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache) {
  cpu::store_kv(k, v, slot_mapping, cache);
}
void CpuKernels::attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch,
                           const AttentionParams& p, Tensor& out) {
  cpu::attention(q, cache, batch, p, out);
}
void CpuKernels::swiglu(const Tensor& x, Tensor& y) { cpu::swiglu(x, y); }
void CpuKernels::embedding(const Tensor& ids, const Tensor& table, Tensor& out) { cpu::embedding(ids, table, out); }
void CpuKernels::add(const Tensor& a, const Tensor& b, Tensor& out) { cpu::add(a, b, out); }
void CpuKernels::gather_rows(const Tensor& x, const Tensor& index, Tensor& out) { cpu::gather_rows(x, index, out); }
void CpuKernels::argmax(const Tensor& x, Tensor& out) { cpu::argmax(x, out); }
void CpuKernels::softmax(const Tensor& x, Tensor& out) { cpu::softmax(x, out); }
void CpuKernels::convert(const Tensor& x, Tensor& out) { cpu::convert(x, out); }

}  // namespace cpu
}  // namespace rill
