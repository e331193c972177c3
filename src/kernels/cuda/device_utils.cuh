// kernels/cuda/device_utils.cuh — small device helpers shared by the .cu files: bf16 packing,
// warp/block reductions, 16-byte streaming loads. Header-only, device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rill::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

/// Round-to-nearest-even f32 → bf16 then back (a bf16 store and load).
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// silu(g) = g·sigmoid(g) in f32 (torch's formula); SwiGLU then rounds it to bf16 before the product
// with the up projection (two torch ops). The elementwise kernel and the GEMM's SwiGLU epilogue share it.
__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }
// The SwiGLU of a gate/up product's f32 sums g and u (bias included): each rounded to bf16 as the
// product's output would be, then silu rounded, times u; the caller rounds the result once — the
// bits of the GEMM followed by the SwiGLU kernel (the GEMMs' fused epilogues).
__device__ __forceinline__ float swiglu_of_sums(float g, float u) {
  return round_bf16(silu(round_bf16(g))) * round_bf16(u);
}

// RMSNorm's output before its rounding: x̂ (the input times 1/rms) rounded to bf16 then times the
// weight (Llama, Qwen3), times (1 + w) with one_plus, or x̂ times w in f32 with fp32_scale (the norm
// kernels and the fused decode MLP block's norm: NormParams).
__device__ __forceinline__ float norm_out(float xhat, float wf, bool one_plus, bool fp32_scale) {
  if (one_plus) wf = 1.f + wf;
  if (fp32_scale) return xhat * wf;
  return round_bf16(xhat) * wf;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block; every thread gets the result. scratch: 32 floats of shared memory.
/// Contains __syncthreads(): call from all threads.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

/// An L2 eviction policy for data read once a step (createpolicy): its lines go first when L2
/// needs room, so the step's other data (code, activations, tables) stays.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

/// 16-byte load that bypasses L1 allocation, with an L2 policy (weights streamed once a step:
/// l2_evict_first_policy()).
__device__ __forceinline__ uint4 load_stream16(const void* p, uint64_t policy) {
  uint4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(policy));
#else
  (void)policy;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
#endif
  return r;
}

__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}

__device__ __forceinline__ uint32_t float2_to_bf16x2(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

inline unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace rill::cuda
