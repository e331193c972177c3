// kernels/cpu/ops.h — the CPU ops as free functions (what CpuKernels forwards to).
// Contract: identical to the Kernels methods of the same name (kernels/kernels.h); activations are
// f32, weights f32 or bf16. Each op checks its arguments first and throws "[op] ..." rill::Errors.
#pragma once

#include "kernels/kernels.h"

namespace rill::cpu {

void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
void rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y);
void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y);
void rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table);
/// A negative slot (-1) marks a padding token that is not stored.
void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache);
void attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, const AttentionParams& p,
               Tensor& out);
void swiglu(const Tensor& x, Tensor& y);
void embedding(const Tensor& ids, const Tensor& table, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void gather_rows(const Tensor& x, const Tensor& index, Tensor& out);
/// NaN counts as smaller than every number (a row of NaNs yields 0); ties go to the lowest index.
void argmax(const Tensor& x, Tensor& out);
/// Rows follow IEEE arithmetic: a row whose maximum is ±inf or NaN comes out NaN (as in torch).
void softmax(const Tensor& x, Tensor& out);
void convert(const Tensor& x, Tensor& out);

}  // namespace rill::cpu
