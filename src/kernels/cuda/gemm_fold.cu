// kernels/cuda/gemm_fold.cu — the batch-invariant GEMM's small kernels (split from gemm.cu): the
// split schedule's reduction (the ranges' partials added in range order from 0, then the bias, one
// rounding — the fold schedule's additions), a deferred product's fold into a consumer's buffer,
// and the fallback for shapes the tensor-core kernels cannot load.
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/partials.cuh"

namespace rill::cuda {
namespace {

using gemm_detail::GemmKernelArgs;

// The split schedule's second pass: the same additions as the fold schedule's register total.
__global__ void gemm_reduce_kernel(GemmKernelArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.m * a.n) return;
  float s = 0.f;
  for (int p = 0; p < a.splits; ++p) s += a.ws[int64_t(p) * a.m * a.n + i];
  if (a.bias) s += __bfloat162float(a.bias[i % a.n]);
  *out_at(a, i / a.n, i % a.n) = __float2bfloat16_rn(s);
}

// A deferred input's values into dst [rows, cols] (launch_fold_into).
__global__ void fold_into_kernel(PartialsIn p, bf16* dst, int64_t rows, int64_t cols) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  dst[i] = folded(p, i / cols, i % cols);
}

// Shapes the tensor-core kernel cannot load with 16-byte copies (K % 8 != 0, misaligned x or
// w): one thread per output, the same split ranges, k in order with fmaf. Slow, still invariant.
__global__ void gemm_fallback_kernel(GemmKernelArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.m * a.n) return;
  const int64_t row = i / a.n, col = i % a.n;
  const bf16* x = a.x + row * a.k;
  const bf16* w = a.w + col * a.k;
  float total = 0.f;
  for (int s = 0; s < a.splits; ++s) {
    float acc = 0.f;
    const int64_t ke = min(a.k, int64_t(s + 1) * a.ks);
    for (int64_t kk = int64_t(s) * a.ks; kk < ke; ++kk)
      acc = fmaf(__bfloat162float(x[kk]), __bfloat162float(w[kk]), acc);
    total += acc;
  }
  if (a.bias) total += __bfloat162float(a.bias[col]);
  *out_at(a, row, col) = __float2bfloat16_rn(total);
}

}  // namespace

namespace gemm_detail {
void launch_gemm_reduce(const GemmKernelArgs& a, cudaStream_t stream) {
  launch_pdl(gemm_reduce_kernel, dim3(unsigned(ceil_div(a.m * a.n, int64_t(256)))), dim3(256), 0, stream, a);
  RILL_CUDA_CHECK_LAUNCH();
}
void launch_gemm_fallback(const GemmKernelArgs& a, cudaStream_t stream) {
  launch_pdl(gemm_fallback_kernel, dim3(unsigned(ceil_div(a.m * a.n, int64_t(256)))), dim3(256), 0, stream, a);
  RILL_CUDA_CHECK_LAUNCH();
}
}  // namespace gemm_detail

void launch_gemm_fold(const GemmPartials& p, cudaStream_t stream) {
  if (!p.active() || p.m * p.n == 0) return;
  GemmKernelArgs k{};
  k.ws = const_cast<float*>(p.ws);
  k.bias = static_cast<const bf16*>(p.bias);
  k.ny = p.num_outs;
  for (int s = 0; s < p.num_outs; ++s) k.ys[s] = static_cast<bf16*>(p.outs[s]), k.y_end[s] = p.out_end[s];
  k.m = p.m;
  k.n = p.n;
  k.splits = p.splits;
  launch_pdl(gemm_reduce_kernel, dim3(unsigned(ceil_div(p.m * p.n, int64_t(256)))), dim3(256), 0, stream, k);
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_fold_into(const PartialsIn& p, void* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (!p.ws || rows * cols == 0) return;
  launch_pdl(fold_into_kernel, dim3(unsigned(ceil_div(rows * cols, int64_t(256)))), dim3(256), 0, stream, p,
             static_cast<bf16*>(dst), rows, cols);
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace rill::cuda
