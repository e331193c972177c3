// kernels/cpu/cpu_kernels.h — CpuKernels: the Kernels interface on the host (f32 activations).
// It owns no state besides the allocator reference: the ops live in kernels/cpu/<op>.cpp and run on
// ThreadPool::global(); all work is finished when a call returns (synchronize() is a no-op).
#pragma once

#include "kernels/kernels.h"

namespace rill::cpu {

class CpuKernels final : public Kernels {
 public:
  Device device() const override { return Device::cpu; }
  DType activation_dtype() const override { return DType::f32; }
  Allocator& allocator() override { return cpu_allocator(); }
  void upload(const void* host, Tensor dst) override;
  void download(const Tensor& src, void* host) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override {}

  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override;
  void rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) override;
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) override;
  void rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) override;
  void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache) override;
  void attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, const AttentionParams& p,
                 Tensor& out) override;
  void swiglu(const Tensor& x, Tensor& y) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void gather_rows(const Tensor& x, const Tensor& index, Tensor& out) override;
  void argmax(const Tensor& x, Tensor& out) override;
  void softmax(const Tensor& x, Tensor& out) override;
  void convert(const Tensor& x, Tensor& out) override;
  void sample(const SampleArgs& args) override;                        // sampling.cpp
  void copy_kv_blocks(KvLayer& cache, const Tensor& src_dst) override;  // sampling.cpp
  // Gated DeltaNet ops: conv1d.cpp, gated_delta.cpp, gdn_elementwise.cpp
  void causal_conv1d(const Tensor& x, const Tensor& w, const StateBatch& batch, Tensor& conv_state, Tensor& y,
                     bool silu) override;
  void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const StateBatch& batch, Tensor& state, Tensor& out, const DeltaRuleParams& p) override;
  void l2_norm(const Tensor& x, float eps, float scale, Tensor& y) override;
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) override;
  void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias, Tensor& g,
                 Tensor& beta) override;
  void sigmoid_mul(const Tensor& x, const Tensor& gate, Tensor& out) override;
};

}  // namespace rill::cpu
