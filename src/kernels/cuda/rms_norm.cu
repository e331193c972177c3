// kernels/cuda/rms_norm.cu — rms_norm and the fused add_rms_norm (bf16 activations).
// Rounding follows NormParams exactly: Llama/Qwen3 round x̂ to bf16, then multiply by the bf16
// weight and round again; scale_in_fp32 multiplies in f32 and rounds once; one_plus_weight
// uses (1 + w). The mean of squares is taken in f32 over the (rounded) input row.
// One warp per row for short rows (per-head q/k norms), one block per row otherwise. Each
// element is read and written by the same thread in both passes, so x and y may alias.
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

template <typename W>
struct NormKernelArgs {
  const bf16* x;
  bf16* residual;
  const W* w;
  bf16* y;
  int64_t rows, dim;
  float eps;
  bool one_plus, fp32_scale;
};

template <typename W>
__device__ __forceinline__ float norm_out(float xhat, const W* w, int64_t c, bool one_plus, bool fp32_scale) {
  float wf = to_float(w[c]);
  if (one_plus) wf = 1.f + wf;
  if (fp32_scale) return xhat * wf;
  return round_bf16(xhat) * wf;
}

// kVec elements per access (8: 16-byte loads; 1: scalar). kRowThreads threads per row.
template <typename W, int kVec, int kRowThreads>
__global__ void rms_norm_kernel(NormKernelArgs<W> a) {
  pdl_wait();
  pdl_trigger();
  __shared__ float scratch[32];
  int64_t row = kRowThreads == 32 ? int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32 : blockIdx.x;
  int t = kRowThreads == 32 ? (threadIdx.x & 31) : threadIdx.x;
  if (kRowThreads == 32 && row >= a.rows) return;
  const bf16* x = a.x + row * a.dim;
  bf16* r = a.residual ? a.residual + row * a.dim : nullptr;
  bf16* y = a.y + row * a.dim;
  float ss = 0.f;
  for (int64_t c = int64_t(t) * kVec; c < a.dim; c += int64_t(kRowThreads) * kVec) {
    bf16 v[kVec];
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(x + c);
    } else {
      v[0] = x[c];
    }
    if (r) {
      bf16 rv[kVec];
      if constexpr (kVec == 8) {
        *reinterpret_cast<uint4*>(rv) = *reinterpret_cast<const uint4*>(r + c);
      } else {
        rv[0] = r[c];
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = __float2bfloat16_rn(__bfloat162float(rv[i]) + __bfloat162float(v[i]));
      if constexpr (kVec == 8) {
        *reinterpret_cast<uint4*>(r + c) = *reinterpret_cast<uint4*>(v);
      } else {
        r[c] = v[0];
      }
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float f = __bfloat162float(v[i]);
      ss += f * f;
    }
  }
  ss = kRowThreads == 32 ? warp_sum(ss) : block_sum(ss, scratch);
  float inv = rsqrtf(ss / float(a.dim) + a.eps);
  const bf16* src = r ? r : x;
  for (int64_t c = int64_t(t) * kVec; c < a.dim; c += int64_t(kRowThreads) * kVec) {
    bf16 v[kVec];
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(src + c);
    } else {
      v[0] = src[c];
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      v[i] = __float2bfloat16_rn(norm_out(__bfloat162float(v[i]) * inv, a.w, c + i, a.one_plus, a.fp32_scale));
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(y + c) = *reinterpret_cast<uint4*>(v);
    } else {
      y[c] = v[0];
    }
  }
}

template <typename W>
void launch_typed(const RmsNormArgs& a, cudaStream_t stream) {
  NormKernelArgs<W> k{static_cast<const bf16*>(a.x), static_cast<bf16*>(a.residual), static_cast<const W*>(a.w),
                      static_cast<bf16*>(a.y), a.rows, a.dim, a.eps, a.one_plus_weight, a.scale_in_fp32};
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool vec = a.dim % 8 == 0 && aligned(a.x) && aligned(a.y) && (!a.residual || aligned(a.residual));
  if (a.dim <= 1024) {
    constexpr int kRowsPerBlock = 8;
    unsigned grid = ceil_div(a.rows, kRowsPerBlock);
    if (vec) launch_pdl(rms_norm_kernel<W, 8, 32>, dim3(grid), dim3(32 * kRowsPerBlock), 0, stream, k);
    else launch_pdl(rms_norm_kernel<W, 1, 32>, dim3(grid), dim3(32 * kRowsPerBlock), 0, stream, k);
  } else {
    constexpr int kBlock = 512;
    if (vec) launch_pdl(rms_norm_kernel<W, 8, kBlock>, dim3(unsigned(a.rows)), dim3(kBlock), 0, stream, k);
    else launch_pdl(rms_norm_kernel<W, 1, kBlock>, dim3(unsigned(a.rows)), dim3(kBlock), 0, stream, k);
  }
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (a.w_dtype == DType::bf16) launch_typed<bf16>(a, stream);
  else if (a.w_dtype == DType::f32) launch_typed<float>(a, stream);
  else throw_error("[rms_norm] weight dtype must be f32 or bf16");
}

}  // namespace rill::cuda
