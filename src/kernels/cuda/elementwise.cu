// kernels/cuda/elementwise.cu — memory-bound elementwise ops: swiglu, add, convert, embedding,
// gather_rows. Numerics follow torch's bf16 ops: each op computes in f32 and rounds its own
// result once (swiglu is two torch ops, silu then mul, hence two roundings).
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/partials.cuh"

namespace rill::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < (int64_t(1) << 20) ? blocks : (int64_t(1) << 20));
}

// One thread per output pair when inter is even (4-byte accesses), else per element.
__global__ void swiglu_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t m, int64_t inter) {
  pdl_wait();
  pdl_trigger();
  int64_t n = m * inter;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / inter, c = i - r * inter;
    const bf16* row = x + r * 2 * inter;
    float g = __bfloat162float(row[c]);
    float u = __bfloat162float(row[inter + c]);
    y[i] = __float2bfloat16_rn(round_bf16(silu(g)) * u);
  }
}

__global__ void swiglu_kernel2(const __nv_bfloat162* __restrict__ x, __nv_bfloat162* __restrict__ y, int64_t m,
                               int64_t half_inter) {
  pdl_wait();
  pdl_trigger();
  int64_t n = m * half_inter;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / half_inter, c = i - r * half_inter;
    const __nv_bfloat162* row = x + r * 2 * half_inter;
    float2 g = __bfloat1622float2(row[c]);
    float2 u = __bfloat1622float2(row[half_inter + c]);
    y[i] = __floats2bfloat162_rn(round_bf16(silu(g.x)) * u.x, round_bf16(silu(g.y)) * u.y);
  }
}

// 8 outputs a thread (16-byte loads and store; inter % 8 == 0, 16-byte aligned rows): grid
// (column blocks, row blocks), no division per element (the pair kernel's 64-bit index division
// held it to ~56% of the copy rate at 4096 tokens × 12288).
// xp (x still as a GEMM's partials, partials_vec8): g and u folded on load, and x's row written as
// the GEMM would have.
__global__ void swiglu_vec8_kernel(bf16* __restrict__ x, bf16* __restrict__ y, int64_t m, int64_t inter,
                                   bool early_trigger, PartialsIn xp) {
  pdl_wait_trigger(early_trigger);
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (c >= inter) return;
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    bf16* row = x + r * 2 * inter;
    uint4 gv, uv;
    if (xp.ws) {
      gv = folded8(xp, r, c);
      uv = folded8(xp, r, inter + c);
      *reinterpret_cast<uint4*>(row + c) = gv;
      *reinterpret_cast<uint4*>(row + inter + c) = uv;
    } else {
      gv = *reinterpret_cast<const uint4*>(row + c);
      uv = *reinterpret_cast<const uint4*>(row + inter + c);
    }
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
    uint4 out;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 g = __bfloat1622float2(g2[i]), u = __bfloat1622float2(u2[i]);
      o2[i] = __floats2bfloat162_rn(round_bf16(silu(g.x)) * u.x, round_bf16(silu(g.y)) * u.y);
    }
    *reinterpret_cast<uint4*>(y + r * inter + c) = out;
  }
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

// bf16 pairs: 4-byte accesses.
__global__ void add_bf16x2_kernel(const __nv_bfloat162* a, const __nv_bfloat162* b, __nv_bfloat162* out, int64_t n2) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n2; i += int64_t(gridDim.x) * blockDim.x) {
    float2 x = __bfloat1622float2(a[i]), y = __bfloat1622float2(b[i]);
    out[i] = __floats2bfloat162_rn(x.x + y.x, x.y + y.y);
  }
}

template <typename From, typename To>
__global__ void convert_kernel(const From* x, To* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<To>(to_float(x[i]));
}

template <typename From, typename To>
void convert_as(const void* x, void* out, int64_t n, cudaStream_t stream) {
  convert_kernel<From, To><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const From*>(x), static_cast<To*>(out), n);
  RILL_CUDA_CHECK_LAUNCH();
}

template <typename T>
__global__ void embedding_kernel(const int32_t* ids, const T* table, bf16* out, int64_t hidden, int64_t vocab) {
  pdl_wait();
  pdl_trigger();
  int64_t t = blockIdx.y;
  int32_t id = ids[t];
  bool ok = id >= 0 && id < vocab;
  const T* src = table + (ok ? int64_t(id) : 0) * hidden;
  bf16* dst = out + t * hidden;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < hidden; c += int64_t(gridDim.x) * blockDim.x)
    dst[c] = ok ? __float2bfloat16_rn(to_float(src[c])) : __float2bfloat16_rn(0.f);
}

// Row copy in 16-byte (Vec = uint4) or 4-byte / 1-byte units.
template <typename Vec>
__global__ void gather_kernel(const Vec* x, const int32_t* index, Vec* out, int64_t row_vecs, int64_t src_rows) {
  pdl_wait();
  pdl_trigger();
  int64_t r = blockIdx.y;
  int32_t src = index[r];
  bool ok = src >= 0 && src < src_rows;
  Vec* dst = out + r * row_vecs;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < row_vecs; c += int64_t(gridDim.x) * blockDim.x) {
    if (ok) {
      dst[c] = x[int64_t(src) * row_vecs + c];
    } else {
      Vec zero{};
      dst[c] = zero;
    }
  }
}

template <typename Vec>
void gather_as(const void* x, const int32_t* index, void* out, int64_t rows, int64_t row_bytes, int64_t src_rows,
               cudaStream_t stream) {
  int64_t row_vecs = row_bytes / int64_t(sizeof(Vec));
  dim3 grid(ceil_div(row_vecs, kThreads) < 64 ? ceil_div(row_vecs, kThreads) : 64, unsigned(rows));
  launch_pdl(gather_kernel<Vec>, dim3(grid), dim3(kThreads), 0, stream, static_cast<const Vec*>(x), index, static_cast<Vec*>(out),
                                                    row_vecs, src_rows);
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_swiglu(const void* x, void* y, int64_t m, int64_t inter, cudaStream_t stream, const PartialsIn& xp) {
  if (m * inter == 0) return;
  const bool vec8 = inter % 8 == 0 && aligned16(x) && aligned16(y);
  if (xp.ws && !(vec8 && partials_vec8(xp))) {  // a deferred product the vector kernel cannot fold: first
    launch_fold_into(xp, const_cast<void*>(x), m, 2 * inter, stream);
    launch_swiglu(x, y, m, inter, stream);
    return;
  }
  if (vec8) {
    constexpr int kVecThreads = 128;
    const dim3 grid(unsigned(ceil_div(inter / 8, int64_t(kVecThreads))), unsigned(std::min<int64_t>(m, 65535)));
    launch_pdl(swiglu_vec8_kernel, grid, dim3(kVecThreads), 0, stream, static_cast<bf16*>(const_cast<void*>(x)),
               static_cast<bf16*>(y), m, inter, pdl_early_trigger(), xp);
  } else if (inter % 2 == 0) {
    int64_t n = m * inter / 2;
    launch_pdl(swiglu_kernel2, dim3(grid_for(n)), dim3(kThreads), 0, stream, static_cast<const __nv_bfloat162*>(x),
                                                         static_cast<__nv_bfloat162*>(y), m, inter / 2);
  } else {
    launch_pdl(swiglu_kernel, dim3(grid_for(m * inter)), dim3(kThreads), 0, stream, static_cast<const bf16*>(x), static_cast<bf16*>(y),
                                                                m, inter);
  }
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_add(const void* a, const void* b, void* out, int64_t n, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::bf16 && n % 2 == 0) {
    launch_pdl(add_bf16x2_kernel, dim3(grid_for(n / 2)), dim3(kThreads), 0, stream, 
        static_cast<const __nv_bfloat162*>(a), static_cast<const __nv_bfloat162*>(b),
        static_cast<__nv_bfloat162*>(out), n / 2);
  } else if (dtype == DType::bf16) {
    launch_pdl(add_kernel<bf16>, dim3(grid_for(n)), dim3(kThreads), 0, stream, static_cast<const bf16*>(a), static_cast<const bf16*>(b),
                                                            static_cast<bf16*>(out), n);
  } else if (dtype == DType::f32) {
    launch_pdl(add_kernel<float>, dim3(grid_for(n)), dim3(kThreads), 0, stream, static_cast<const float*>(a),
                                                             static_cast<const float*>(b), static_cast<float*>(out), n);
  } else {
    throw_error("[add] dtype must be f32 or bf16");
  }
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_convert(const void* x, DType from, void* out, DType to, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  auto pick = [&](auto from_tag) {
    using From = decltype(from_tag);
    switch (to) {
      case DType::f32: convert_as<From, float>(x, out, n, stream); return;
      case DType::bf16: convert_as<From, bf16>(x, out, n, stream); return;
      case DType::f16: convert_as<From, __half>(x, out, n, stream); return;
      default: throw_error("[convert] target dtype must be f32, f16 or bf16");
    }
  };
  switch (from) {
    case DType::f32: pick(float{}); return;
    case DType::bf16: pick(bf16{}); return;
    case DType::f16: pick(__half{}); return;
    default: throw_error("[convert] source dtype must be f32, f16 or bf16");
  }
}

void launch_embedding(const int32_t* ids, const void* table, DType table_dtype, void* out, int64_t tokens,
                      int64_t hidden, int64_t vocab, cudaStream_t stream) {
  if (tokens == 0 || hidden == 0) return;
  dim3 grid(ceil_div(hidden, kThreads) < 32 ? ceil_div(hidden, kThreads) : 32, unsigned(tokens));
  if (table_dtype == DType::bf16)
    launch_pdl(embedding_kernel<bf16>, dim3(grid), dim3(kThreads), 0, stream, ids, static_cast<const bf16*>(table), static_cast<bf16*>(out),
                                                          hidden, vocab);
  else if (table_dtype == DType::f32)
    launch_pdl(embedding_kernel<float>, dim3(grid), dim3(kThreads), 0, stream, ids, static_cast<const float*>(table),
                                                           static_cast<bf16*>(out), hidden, vocab);
  else
    throw_error("[embedding] table dtype must be f32 or bf16");
  RILL_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const void* x, const int32_t* index, void* out, int64_t rows, int64_t row_bytes,
                        int64_t src_rows, cudaStream_t stream) {
  if (rows == 0 || row_bytes == 0) return;
  auto aligned = [&](size_t a) {
    return row_bytes % int64_t(a) == 0 && reinterpret_cast<uintptr_t>(x) % a == 0 &&
           reinterpret_cast<uintptr_t>(out) % a == 0;
  };
  if (aligned(16)) gather_as<uint4>(x, index, out, rows, row_bytes, src_rows, stream);
  else if (aligned(4)) gather_as<uint32_t>(x, index, out, rows, row_bytes, src_rows, stream);
  else gather_as<uint8_t>(x, index, out, rows, row_bytes, src_rows, stream);
}

}  // namespace rill::cuda
