// kernels/cuda/reduce.cu — row reductions over logits: argmax (lowest index wins ties, NaN counts
// as the largest value, as torch.argmax) and softmax with f32 output. One block per row.
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 1024;

struct Best {
  float v;
  int32_t i;
};

// True when a beats b: larger value, NaN above everything, ties to the lower index.
__device__ __forceinline__ bool beats(float av, int32_t ai, float bv, int32_t bi) {
  bool an = av != av, bn = bv != bv;
  if (an || bn) return an && (!bn || ai < bi);
  return av > bv || (av == bv && ai < bi);
}

// Each thread scans its share (16-byte loads, four in flight, when the row is 16-byte aligned);
// `beats` is a total order, so the order of the scan does not change the winner.
template <typename T>
__global__ void argmax_kernel(const T* __restrict__ x, int32_t* out, int64_t cols) {
  __shared__ float sv[32];
  __shared__ int32_t si[32];
  pdl_wait();
  pdl_trigger();
  const T* row = x + int64_t(blockIdx.x) * cols;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  auto visit = [&](float v, int64_t c) {
    if (beats(v, int32_t(c), bv, bi)) bv = v, bi = int32_t(c);
  };
  constexpr int kPer = int(16 / sizeof(T));
  int64_t tail = 0;
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const int64_t nv = cols / kPer;
    const uint4* rv = reinterpret_cast<const uint4*>(row);
    for (int64_t j0 = threadIdx.x; j0 < nv; j0 += 4 * int64_t(blockDim.x)) {
      uint4 q[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = j0 + u * int64_t(blockDim.x);
        q[u] = j < nv ? rv[j] : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = j0 + u * int64_t(blockDim.x);
        if (j >= nv) break;
        const T* e = reinterpret_cast<const T*>(&q[u]);
#pragma unroll
        for (int i = 0; i < kPer; ++i) visit(to_float(e[i]), j * kPer + i);
      }
    }
    tail = nv * kPer;
  }
  for (int64_t c = tail + threadIdx.x; c < cols; c += blockDim.x) visit(to_float(row[c]), c);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (beats(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sv[warp] = bv, si[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    int warps = blockDim.x >> 5;
    bv = lane < warps ? sv[lane] : -INFINITY;
    bi = lane < warps ? si[lane] : INT32_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (beats(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    // A row of -inf only keeps bi at INT32_MAX: report index 0 then.
    if (lane == 0) out[blockIdx.x] = bi == INT32_MAX ? 0 : bi;
  }
}

template <typename T>
__global__ void softmax_kernel(const T* __restrict__ x, float* __restrict__ out, int64_t cols) {
  __shared__ float scratch[32];
  const T* row = x + int64_t(blockIdx.x) * cols;
  float* dst = out + int64_t(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, to_float(row[c]));
  m = block_max(m, scratch);
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(to_float(row[c]) - m);
  s = block_sum(s, scratch);
  float inv = 1.f / s;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = expf(to_float(row[c]) - m) * inv;
}

}  // namespace

void launch_argmax(const void* x, DType dtype, int32_t* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return;
  if (dtype == DType::bf16)
    launch_pdl(argmax_kernel<bf16>, dim3(unsigned(rows)), dim3(kThreads), 0, stream, static_cast<const bf16*>(x), out,
               cols);
  else if (dtype == DType::f32)
    launch_pdl(argmax_kernel<float>, dim3(unsigned(rows)), dim3(kThreads), 0, stream, static_cast<const float*>(x), out,
               cols);
  else
    throw_error("[argmax] dtype must be f32 or bf16");
}

void launch_softmax(const void* x, DType dtype, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return;
  if (dtype == DType::bf16)
    softmax_kernel<bf16><<<unsigned(rows), kThreads, 0, stream>>>(static_cast<const bf16*>(x), out, cols);
  else if (dtype == DType::f32)
    softmax_kernel<float><<<unsigned(rows), kThreads, 0, stream>>>(static_cast<const float*>(x), out, cols);
  else
    throw_error("[softmax] dtype must be f32 or bf16");
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace rill::cuda
