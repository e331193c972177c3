// kernels/cuda/reduce.cu — row reductions over logits: argmax (lowest index wins ties, NaN counts
// as the largest value, as torch.argmax; a cluster of blocks a row while the rows are few) and
// softmax with f32 output (one block a row).
#include <algorithm>

#include <cooperative_groups.h>

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

// The best (bv, bi) of a warp's lanes, in every lane.
__device__ __forceinline__ void warp_best(float& bv, int32_t& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (beats(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
}

// A block's best of row[c_begin, c_end): each thread scans its share (16-byte loads, four in flight,
// when the row is 16-byte aligned and c_begin a multiple of a load's elements); `beats` is a total
// order, so neither the order of the scan nor the split into blocks changes the winner. Every lane of
// warp 0 returns with the block's best in (bv, bi); the other warps' values are partial.
template <typename T>
__device__ void block_best(const T* row, int64_t c_begin, int64_t c_end, float& bv, int32_t& bi, float* sv,
                           int32_t* si) {
  bv = -INFINITY;
  bi = INT32_MAX;
  auto visit = [&](float v, int64_t c) {
    if (beats(v, int32_t(c), bv, bi)) bv = v, bi = int32_t(c);
  };
  constexpr int kPer = int(16 / sizeof(T));
  int64_t tail = c_begin;
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0 && c_begin % kPer == 0) {
    const int64_t v0 = c_begin / kPer, nv = c_end / kPer;
    const uint4* rv = reinterpret_cast<const uint4*>(row);
    for (int64_t j0 = v0 + threadIdx.x; j0 < nv; j0 += 4 * int64_t(blockDim.x)) {
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
    tail = std::max(c_begin, nv * kPer);
  }
  for (int64_t c = tail + threadIdx.x; c < c_end; c += blockDim.x) visit(to_float(row[c]), c);
  warp_best(bv, bi);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sv[warp] = bv, si[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    bv = lane < warps ? sv[lane] : -INFINITY;
    bi = lane < warps ? si[lane] : INT32_MAX;
    warp_best(bv, bi);
  }
}

// out[r] = argmax of row r, on kC blocks a row: with kC > 1 the blocks of a row form a cluster, each
// takes a contiguous share of the row (whole 16-byte loads), and rank 0 reduces the ranks' bests read
// from their shared memory. One block of 1,024 threads reads a 151,936-entry bf16 row in five rounds
// of four 16-byte loads a thread, one round after the other; eight blocks read it in one (a batch-1
// decode step's last kernel: 10 µs from it to the next step's first kernel, 20 before; RESULTS run AK).
template <typename T, int kC>
__global__ void argmax_kernel(const T* __restrict__ x, int32_t* out, int64_t cols) {
  __shared__ float sv[32];
  __shared__ int32_t si[32];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x / kC;
  const T* row = x + r * cols;
  constexpr int64_t kPer = int64_t(16 / sizeof(T));
  const unsigned rank = blockIdx.x % kC;  // the cluster is kC blocks along x
  const int64_t share = (cols + kC * kPer - 1) / (kC * kPer) * kPer;
  const int64_t c_begin = std::min(cols, rank * share), c_end = std::min(cols, c_begin + share);
  float bv;
  int32_t bi;
  block_best(row, c_begin, c_end, bv, bi, sv, si);
  if constexpr (kC > 1) {  // launched on sm_90+ only (set_argmax_cluster)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    __syncthreads();  // warp 0's reads of sv / si are done before thread 0 overwrites slot 0
    if (threadIdx.x == 0) sv[0] = bv, si[0] = bi;
    cluster.sync();  // every rank's best is in its slot 0
    if (rank == 0 && threadIdx.x < 32) {
      const unsigned lane = threadIdx.x;
      bv = lane < kC ? *cluster.map_shared_rank(&sv[0], lane) : -INFINITY;
      bi = lane < kC ? *cluster.map_shared_rank(&si[0], lane) : INT32_MAX;
      warp_best(bv, bi);
    }
    cluster.sync();  // no block leaves while rank 0 reads its shared memory
    if (rank != 0) return;
#endif
  }
  // A row of -inf only keeps bi at INT32_MAX: report index 0 then.
  if (threadIdx.x == 0) out[r] = bi == INT32_MAX ? 0 : bi;
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

int g_argmax_cluster = -1;  // set_argmax_cluster: -1 the rule of argmax_cluster_for, else that many blocks
int g_argmax_sms = 132;

}  // namespace

// Blocks a row: `forced` when set (0 or 1: one block); else row_cluster_blocks' rule, one block beyond it.
int argmax_cluster_for(int64_t rows, int forced, int sms) {
  return std::max(forced >= 0 ? forced : row_cluster_blocks(rows, sms), 1);
}

void set_argmax_cluster(int blocks, int num_sms) {
  g_argmax_cluster = blocks;
  if (num_sms > 0) g_argmax_sms = num_sms;
}

namespace {
template <typename T>
void launch_argmax_as(const T* x, int32_t* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int c = argmax_cluster_for(rows, g_argmax_cluster, g_argmax_sms);
  auto kernel = c == 8 ? argmax_kernel<T, 8> : c == 4 ? argmax_kernel<T, 4> : c == 2 ? argmax_kernel<T, 2>
                                                                               : argmax_kernel<T, 1>;
  launch_pdl_cluster(kernel, dim3(unsigned(rows) * unsigned(c)), dim3(kThreads), 0, stream, dim3(unsigned(c)), x, out,
                     cols);
}
}  // namespace

void launch_argmax(const void* x, DType dtype, int32_t* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return;
  if (dtype == DType::bf16)
    launch_argmax_as(static_cast<const bf16*>(x), out, rows, cols, stream);
  else if (dtype == DType::f32)
    launch_argmax_as(static_cast<const float*>(x), out, rows, cols, stream);
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
