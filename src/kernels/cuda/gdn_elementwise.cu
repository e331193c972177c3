// kernels/cuda/gdn_elementwise.cu — the row-wise ops around the Gated DeltaNet recurrence on the
// GPU: L2 norm, gated RMSNorm, the decay/beta gates and the sigmoid output gate. Maths in f32;
// with bf16 activations each result is rounded where transformers' bf16 code rounds it:
//   gated_rms_norm: bf16(x̂), then bf16(· w), then bf16(· silu(z)) (three torch ops);
//   gdn_gates: β = bf16(sigmoid(b)) (a bf16 sigmoid), g from f32(a) in f32;
//   sigmoid_mul: bf16(x · bf16(sigmoid(gate)));  l2_norm: one rounding of scale·x̂.
// With f32 activations nothing is rounded (the CPU backend's f32 maths). Row ops run one warp
// per row; each element is read and written by the same thread, so x and y may alias.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

__device__ __forceinline__ void store_act(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_act(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float round_act(float v, const float*) { return v; }
__device__ __forceinline__ float round_act(float v, const bf16*) { return round_bf16(v); }
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
// torch softplus with beta 1, threshold 20.
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < (int64_t(1) << 20) ? blocks : (int64_t(1) << 20));
}

template <typename T>
__global__ void l2_norm_kernel(const T* x, T* y, int64_t rows, int64_t dim, float eps, float scale) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * dim;
  T* yr = y + row * dim;
  float ss = 0.f;
  for (int64_t c = lane; c < dim; c += 32) {
    const float v = to_float(xr[c]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = 1.f / sqrtf(ss + eps);
  for (int64_t c = lane; c < dim; c += 32) store_act(yr + c, to_float(xr[c]) * inv * scale);
}

template <typename T>
__global__ void gated_rms_norm_kernel(const T* x, const T* z, const float* __restrict__ w, T* y, int64_t rows,
                                      int64_t dim, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* xr = x + row * dim;
  const T* zr = z + row * dim;
  T* yr = y + row * dim;
  float ss = 0.f;
  for (int64_t c = lane; c < dim; c += 32) {
    const float v = to_float(xr[c]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = 1.f / sqrtf(ss / float(dim) + eps);
  for (int64_t c = lane; c < dim; c += 32) {
    const float zv = to_float(zr[c]);
    const float n = round_act(round_act(to_float(xr[c]) * inv, y) * w[c], y);
    store_act(yr + c, n * (zv / (1.f + expf(-zv))));
  }
}

template <typename T>
__global__ void gdn_gates_kernel(const T* a, const T* b, const float* __restrict__ a_log,
                                 const float* __restrict__ dt_bias, float* g, float* beta, int64_t n, int64_t heads) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = i % heads;
    g[i] = -expf(a_log[h]) * softplus(to_float(a[i]) + dt_bias[h]);
    beta[i] = round_act(sigmoid(to_float(b[i])), a);
  }
}

template <typename T>
__global__ void sigmoid_mul_kernel(const T* x, const T* gate, T* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_act(out + i, to_float(x[i]) * round_act(sigmoid(to_float(gate[i])), out));
}

template <typename F>
void dispatch(DType d, const char* what, F&& f) {
  if (d == DType::bf16) f(bf16{});
  else if (d == DType::f32) f(float{});
  else throw_error(what);
}

}  // namespace

void launch_l2_norm(const void* x, void* y, DType act_dtype, int64_t rows, int64_t dim, float eps, float scale,
                    cudaStream_t stream) {
  if (rows == 0 || dim == 0) return;
  dispatch(act_dtype, "[l2_norm] activations must be bf16 or f32", [&](auto tag) {
    using T = decltype(tag);
    l2_norm_kernel<T><<<ceil_div(rows, kRowsPerBlock), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                                               static_cast<T*>(y), rows, dim, eps, scale);
  });
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_gated_rms_norm(const void* x, const void* z, const float* w, void* y, DType act_dtype, int64_t rows,
                           int64_t dim, float eps, cudaStream_t stream) {
  if (rows == 0 || dim == 0) return;
  dispatch(act_dtype, "[gated_rms_norm] activations must be bf16 or f32", [&](auto tag) {
    using T = decltype(tag);
    gated_rms_norm_kernel<T><<<ceil_div(rows, kRowsPerBlock), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(z), w, static_cast<T*>(y), rows, dim, eps);
  });
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_gdn_gates(const void* a, const void* b, DType act_dtype, const float* a_log, const float* dt_bias,
                      float* g, float* beta, int64_t tokens, int64_t heads, cudaStream_t stream) {
  const int64_t n = tokens * heads;
  if (n == 0) return;
  dispatch(act_dtype, "[gdn_gates] a and b must be bf16 or f32", [&](auto tag) {
    using T = decltype(tag);
    gdn_gates_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                              a_log, dt_bias, g, beta, n, heads);
  });
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_sigmoid_mul(const void* x, const void* gate, void* out, DType act_dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch(act_dtype, "[sigmoid_mul] activations must be bf16 or f32", [&](auto tag) {
    using T = decltype(tag);
    sigmoid_mul_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(gate),
                                                                static_cast<T*>(out), n);
  });
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace rill::cuda
