// kernels/cuda/conv1d.cu — depthwise causal conv1d over time with a rolling per-row f32 state
// (the short convolution of Gated DeltaNet layers), prefill and decode alike. A row's window is
// [conv_state (K-1 inputs) ‖ its new inputs]; y[t,c] = Σ_k w[c,k]·window[t+k, c], optionally
// SiLU. With bf16 activations the result rounds like transformers' bf16 conv1d then SiLU: the
// convolution (f32 accumulation) is rounded to bf16, then SiLU is taken and rounded again.
// Two kernels in stream order: every output (one thread per token × channel, reading the old
// state), then the state update (one thread per row × channel: the window's last K-1 inputs).
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxWidth = 8;

__device__ __forceinline__ void store_act(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_act(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float round_act(float v, const float*) { return v; }
__device__ __forceinline__ float round_act(float v, const bf16*) { return round_bf16(v); }

// Row holding token t: the last r with cu_seqlens[r] ≤ t (empty rows share offsets).
__device__ __forceinline__ int row_of(const int32_t* cu, int num_rows, int64_t t) {
  int lo = 0, hi = num_rows;  // invariant: cu[lo] ≤ t < cu[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (cu[mid] <= t) lo = mid;
    else hi = mid;
  }
  return lo;
}

template <typename T>
__global__ void conv1d_out_kernel(const T* __restrict__ x, const float* __restrict__ w, const float* state,
                                  T* __restrict__ y, StateRowsArgs rows, int64_t C, int K, bool silu) {
  const int64_t t = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  if (c >= C) return;
  const int r = row_of(rows.cu_seqlens, rows.num_rows, t);
  const int64_t begin = rows.cu_seqlens[r];
  const int slot = rows.slots[r];
  if (slot < 0 || slot >= rows.num_slots) {
    store_act(y + t * C + c, NAN);
    return;
  }
  const bool has = rows.has_state[r] != 0;
  const float* st = state + int64_t(slot) * (K - 1) * C;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) {
    const int64_t src = t - (K - 1) + k;
    float xv;
    if (src >= begin) xv = to_float(x[src * C + c]);
    else xv = has ? st[((K - 1) + (src - begin)) * C + c] : 0.f;
    acc += w[c * K + k] * xv;
  }
  if (silu) {
    acc = round_act(acc, y);
    acc = acc / (1.f + expf(-acc));
  }
  store_act(y + t * C + c, acc);
}

template <typename T>
__global__ void conv1d_state_kernel(const T* __restrict__ x, float* state, StateRowsArgs rows, int64_t C, int K) {
  const int r = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  if (c >= C) return;
  const int slot = rows.slots[r];
  if (slot < 0 || slot >= rows.num_slots) return;
  const int64_t begin = rows.cu_seqlens[r], n = rows.cu_seqlens[r + 1] - begin;
  const bool has = rows.has_state[r] != 0;
  float* st = state + int64_t(slot) * (K - 1) * C;
  float keep[kMaxWidth - 1];
  // Window position n + j for j < K-1: an old state entry while it lies before the new inputs.
#pragma unroll
  for (int j = 0; j < kMaxWidth - 1; ++j) {
    if (j >= K - 1) break;
    const int64_t pos = n + j;
    keep[j] = pos < K - 1 ? (has ? st[pos * C + c] : 0.f) : to_float(x[(begin + pos - (K - 1)) * C + c]);
  }
#pragma unroll
  for (int j = 0; j < kMaxWidth - 1; ++j) {
    if (j >= K - 1) break;
    st[int64_t(j) * C + c] = keep[j];
  }
}

template <typename T>
void launch_typed(const void* x, const float* w, float* conv_state, void* y, const StateRowsArgs& rows,
                  int64_t tokens, int64_t C, int K, bool silu, cudaStream_t stream) {
  const unsigned cblocks = ceil_div(C, kThreads);
  if (tokens > 0) {
    conv1d_out_kernel<T><<<dim3(unsigned(tokens), cblocks), kThreads, 0, stream>>>(
        static_cast<const T*>(x), w, conv_state, static_cast<T*>(y), rows, C, K, silu);
    RILL_CUDA_CHECK_LAUNCH();
  }
  if (K > 1) {
    conv1d_state_kernel<T><<<dim3(unsigned(rows.num_rows), cblocks), kThreads, 0, stream>>>(
        static_cast<const T*>(x), conv_state, rows, C, K);
    RILL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_causal_conv1d(const void* x, const float* w, float* conv_state, void* y, DType act_dtype,
                          const StateRowsArgs& rows, int64_t tokens, int64_t channels, int kernel_width, bool silu,
                          cudaStream_t stream) {
  if (rows.num_rows == 0 || channels == 0) return;
  if (kernel_width < 1 || kernel_width > kMaxWidth) throw_error("[causal_conv1d] kernel width must be in [1, 8]");
  if (act_dtype == DType::bf16)
    launch_typed<bf16>(x, w, conv_state, y, rows, tokens, channels, kernel_width, silu, stream);
  else if (act_dtype == DType::f32)
    launch_typed<float>(x, w, conv_state, y, rows, tokens, channels, kernel_width, silu, stream);
  else
    throw_error("[causal_conv1d] activations must be bf16 or f32");
}

}  // namespace rill::cuda
