// kernels/cuda/sampling.cu — CudaKernels::sample(): one block per row, the same definition as
// the CPU twin (kernels/cpu/sampling.cpp, kernels/sampling_math.h): raw logprobs and top-N alternatives, penalties and bias, temperature,
// then the top-k and top-p thresholds found by exact bisection over the order-preserving uint32
// keys of the values (32 counting passes each: no sort, no extra memory), min-p, and a
// Gumbel-max draw keyed by (seed, step, token). A row reads only its own inputs and its reductions
// run in a fixed order, so its token does not depend on the rest of the batch.
// NOTE: written to be simple and obviously correct; the bisections re-read the row from the
// workspace 32-64 times, which costs ~1 ms per 100 rows of 152k-token vocabulary when top-k/top-p
// are on (greedy and plain temperature sampling read it 3 times).
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/sampling_math.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

struct Shared {
  float f[kWarps];
  double d[kWarps];
  int32_t i[kWarps];
  unsigned long long u[kWarps];
};

__device__ float block_max(float v, Shared& s) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.f[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = s.f[0];
  for (int w = 1; w < kWarps; ++w) r = fmaxf(r, s.f[w]);
  return r;
}

__device__ float block_sum(float v, Shared& s) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.f[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = 0.f;
  for (int w = 0; w < kWarps; ++w) r += s.f[w];  // fixed order: the same bits on every launch
  return r;
}

__device__ unsigned long long block_count(unsigned long long v, Shared& s) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.u[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned long long r = 0;
  for (int w = 0; w < kWarps; ++w) r += s.u[w];
  return r;
}

// (score, index) with a higher score winning and the lower index winning ties; index -1 = none.
struct Best {
  double score;
  int32_t index;
};

__device__ __forceinline__ bool better(const Best& a, const Best& b) {
  if (a.index < 0) return false;
  if (b.index < 0) return true;
  return a.score > b.score || (a.score == b.score && a.index < b.index);
}

__device__ Best block_best(Best v, Shared& s) {
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, v.score, o), __shfl_xor_sync(0xffffffffu, v.index, o)};
    if (better(other, v)) v = other;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    s.d[threadIdx.x >> 5] = v.score;
    s.i[threadIdx.x >> 5] = v.index;
  }
  __syncthreads();
  Best r{s.d[0], s.i[0]};
  for (int w = 1; w < kWarps; ++w) {
    Best c{s.d[w], s.i[w]};
    if (better(c, r)) r = c;
  }
  return r;
}

__device__ __forceinline__ float load(const float* x, int64_t i) { return x[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* x, int64_t i) { return __bfloat162float(x[i]); }

// argmax of w over non-NaN values, lowest index on ties (0 when every value is NaN).
__device__ int32_t row_argmax(const float* w, int64_t V, Shared& s) {
  Best b{-INFINITY, -1};
  for (int64_t i = threadIdx.x; i < V; i += kThreads) {
    const float v = w[i];
    if (v != v) continue;
    Best c{double(v), int32_t(i)};
    if (better(c, b)) b = c;
  }
  b = block_best(b, s);
  return b.index < 0 ? 0 : b.index;
}

// row_argmax of the raw logits, read 16 bytes a load with four loads in flight a thread (a plain
// greedy row needs no workspace copy: one pass over the row, ~10 µs for 152k bf16 instead of
// the ~60 µs of a copy and a scalar pass). The same definition: non-NaN values, lowest index on
// ties, 0 when every value is NaN. The visit order does not matter (a total order).
template <typename T>
__device__ int32_t raw_argmax(const T* raw, int64_t V, Shared& s) {
  Best b{-INFINITY, -1};
  auto visit = [&](float v, int64_t i) {
    if (v != v) return;
    Best c{double(v), int32_t(i)};
    if (better(c, b)) b = c;
  };
  constexpr int kPer = int(16 / sizeof(T));
  int64_t tail = 0;
  if (reinterpret_cast<uintptr_t>(raw) % 16 == 0) {
    const int64_t nv = V / kPer;
    const uint4* rv = reinterpret_cast<const uint4*>(raw);
    for (int64_t j0 = threadIdx.x; j0 < nv; j0 += 4 * kThreads) {
      uint4 q[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) q[u] = j0 + u * kThreads < nv ? rv[j0 + u * kThreads] : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = j0 + u * kThreads;
        if (j >= nv) break;
        const T* e = reinterpret_cast<const T*>(&q[u]);
#pragma unroll
        for (int i = 0; i < kPer; ++i) visit(load(e, i), j * kPer + i);
      }
    }
    tail = nv * kPer;
  }
  for (int64_t i = tail + threadIdx.x; i < V; i += kThreads) visit(load(raw, i), i);
  b = block_best(b, s);
  return b.index < 0 ? 0 : b.index;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) sample_kernel(const T* __restrict__ logits, int64_t V,
                                                          const SamplingRowParams* __restrict__ params,
                                                          const SamplingAdjust* __restrict__ adjust,
                                                          float* __restrict__ workspace, int32_t* __restrict__ tokens,
                                                          float* __restrict__ logprobs, int32_t* __restrict__ top_ids,
                                                          const int32_t* __restrict__ pending, int32_t num_pending) {
  __shared__ Shared s;
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x;
  const SamplingRowParams p = params[r];
  const T* raw = logits + int64_t(p.logit_row) * V;
  float* w = workspace + r * V;
  float* lp = logprobs + r * (1 + kMaxTopLogprobs);
  int32_t* top = top_ids + r * kMaxTopLogprobs;
  const bool has_pending = p.pending >= 0 && p.pending < num_pending;
  if (!(p.temperature > 0.f) && !p.logprobs && p.adjust_begin >= p.adjust_end && !has_pending && p.score_token < 0) {
    // Plain greedy: the argmax of the raw row (what the general path computes on its copy).
    const int32_t chosen = raw_argmax(raw, V, s);
    if (threadIdx.x == 0) tokens[r] = chosen;
    return;
  }
  for (int64_t i = threadIdx.x; i < V; i += kThreads) w[i] = load(raw, i);
  float lse = 0.f;
  if (p.logprobs) {
    // Raw log-softmax statistics.
    float m0 = -INFINITY;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) m0 = fmaxf(m0, w[i]);
    m0 = block_max(m0, s);
    float sum = 0.f;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) sum += __expf(w[i] - m0);
    lse = m0 + logf(block_sum(sum, s));
    // Top-N alternatives in (value desc, id asc) order: each round takes the best entry strictly
    // after the previous one in that order.
    float prev_v = INFINITY;
    int32_t prev_i = -1;
    for (int32_t j = 0; j < kMaxTopLogprobs; ++j) {
      Best b{-INFINITY, -1};
      if (j < p.num_top_logprobs) {
        for (int64_t i = threadIdx.x; i < V; i += kThreads) {
          const float v = w[i];
          if (v != v || v > prev_v || (v == prev_v && int32_t(i) <= prev_i)) continue;
          Best c{double(v), int32_t(i)};
          if (better(c, b)) b = c;
        }
        b = block_best(b, s);
      }
      if (threadIdx.x == 0) {
        top[j] = b.index;
        lp[1 + j] = b.index >= 0 ? float(b.score) - lse : -INFINITY;
      }
      if (b.index >= 0) {
        prev_v = float(b.score);
        prev_i = b.index;
      }
    }
  }
  __syncthreads();
  if (p.score_token >= 0) {  // a scored token: no draw, its raw logprob (above) is the result
    if (threadIdx.x == 0) {
      tokens[r] = p.score_token;
      if (p.logprobs) lp[0] = load(raw, p.score_token) - lse;
    }
    return;
  }
  // Penalties and bias (tokens are unique within a row: no two threads touch one entry). A pending
  // draw counts as one more output token: its entry's count + 1, or an entry of its own.
  const int32_t t = has_pending ? pending[p.pending] : -1;
  int t_seen = 0;
  for (int32_t e = p.adjust_begin + int32_t(threadIdx.x); e < p.adjust_end; e += kThreads) {
    const SamplingAdjust d = adjust[e];
    if (d.token < 0 || d.token >= V) continue;
    const bool is_t = d.token == t;
    t_seen |= is_t;
    w[d.token] = sampling::adjust_logit(w[d.token], d.output_count + (is_t ? 1 : 0), is_t ? 1 : d.in_context, d.bias,
                                        p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
  }
  t_seen = __syncthreads_or(t_seen);
  if (threadIdx.x == 0 && t >= 0 && t < V && !t_seen)
    w[t] = sampling::adjust_logit(w[t], 1, 1, 0.f, p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
  __syncthreads();
  int32_t chosen;
  if (!(p.temperature > 0.f)) {
    chosen = row_argmax(w, V, s);
  } else {
    const float inv_t = 1.f / p.temperature;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) {
      const float v = w[i] * inv_t;
      w[i] = v;
      m = fmaxf(m, v);
    }
    m = block_max(m, s);
    if (m == -INFINITY) {
      chosen = row_argmax(w, V, s);
    } else {
      uint32_t lo = 0;
      if (p.top_k > 0 && p.top_k < V) {
        // The largest key t with count(key >= t) >= k is the k-th largest key.
        // 64-bit bounds: (b - a + 1) must not wrap when the range is the whole of uint32.
        uint64_t a = 0, b = 0xffffffffull;
        while (a < b) {
          const uint64_t mid = a + (b - a + 1) / 2;
          unsigned long long c = 0;
          for (int64_t i = threadIdx.x; i < V; i += kThreads) {
            const float v = w[i];
            c += (v == v && uint64_t(sampling::order_key(v)) >= mid) ? 1 : 0;
          }
          if (block_count(c, s) >= (unsigned long long)p.top_k)
            a = mid;
          else
            b = mid - 1;
        }
        lo = uint32_t(a);
      }
      if (p.top_p < 1.f) {
        auto mass = [&](uint64_t t) {
          float acc = 0.f;
          for (int64_t i = threadIdx.x; i < V; i += kThreads) {
            const float v = w[i];
            if (v == v && uint64_t(sampling::order_key(v)) >= t) acc += __expf(v - m);
          }
          return block_sum(acc, s);
        };
        const float target = p.top_p * mass(lo);
        uint64_t a = lo, b = sampling::order_key(m);
        while (a < b) {
          const uint64_t mid = a + (b - a + 1) / 2;
          if (mass(mid) >= target)
            a = mid;
          else
            b = mid - 1;
        }
        lo = uint32_t(a);
      }
      const double min_gap = p.min_p > 0.f ? log(double(p.min_p)) : -INFINITY;
      const uint64_t key = sampling::draw_key(p.seed, p.step);
      Best b{-INFINITY, -1};
      for (int64_t i = threadIdx.x; i < V; i += kThreads) {
        const float v = w[i];
        if (v != v || sampling::order_key(v) < lo) continue;
        const double gap = double(v) - double(m);
        if (gap < min_gap) continue;
        Best c{gap + sampling::gumbel(key, int32_t(i)), int32_t(i)};
        if (better(c, b)) b = c;
      }
      b = block_best(b, s);
      chosen = b.index >= 0 ? b.index : row_argmax(w, V, s);
    }
  }
  if (threadIdx.x == 0) {
    tokens[r] = chosen;
    if (p.logprobs) lp[0] = load(raw, chosen) - lse;
  }
}

void require(bool ok, const char* message) {
  if (!ok) throw_error(message);
}

}  // namespace

void CudaKernels::sample(const SampleArgs& a) {
  settle();
  require(a.logits.defined() && a.logits.ndim() == 2 && a.logits.device() == Device::cuda && a.logits.is_contiguous(),
          "[sample] logits must be a contiguous [L, V] tensor on the CUDA device");
  require(a.logits.dtype() == DType::f32 || a.logits.dtype() == DType::bf16, "[sample] logits must be f32 or bf16");
  require(a.params.nbytes() % sizeof(SamplingRowParams) == 0, "[sample] params is not a whole number of rows");
  const int64_t R = int64_t(a.params.nbytes() / sizeof(SamplingRowParams)), V = a.logits.size(1);
  if (R == 0) return;
  require(a.workspace.dtype() == DType::f32 && a.workspace.numel() >= R * V, "[sample] workspace must be f32 [R, V]");
  require(a.tokens.dtype() == DType::i32 && a.tokens.numel() >= R, "[sample] tokens must be i32 [R]");
  require(a.logprobs.dtype() == DType::f32 && a.logprobs.numel() >= R * (1 + kMaxTopLogprobs),
          "[sample] logprobs must be f32 [R, 21]");
  require(a.top_ids.dtype() == DType::i32 && a.top_ids.numel() >= R * kMaxTopLogprobs, "[sample] top_ids must be i32 [R, 20]");
  require(R <= INT32_MAX && V <= INT32_MAX, "[sample] too many rows or columns");
  // Row ranges (logit_row, adjust range, top-N, score_token) are trusted: the engine's Sampler builds them.
  const auto* params = static_cast<const SamplingRowParams*>(a.params.data());
  const auto* adjust = static_cast<const SamplingAdjust*>(a.adjust.defined() ? a.adjust.data() : nullptr);
  const bool has_pending = a.pending_tokens.defined() && a.pending_tokens.numel() > 0;
  require(!has_pending || (a.pending_tokens.dtype() == DType::i32 && a.pending_tokens.device() == Device::cuda &&
                           a.pending_tokens.numel() <= INT32_MAX),
          "[sample] pending_tokens must be i32 on the CUDA device");
  const int32_t* pending = has_pending ? a.pending_tokens.data_as<const int32_t>() : nullptr;
  const int32_t num_pending = has_pending ? int32_t(a.pending_tokens.numel()) : 0;
  if (a.logits.dtype() == DType::bf16)
    launch_pdl(sample_kernel<__nv_bfloat16>, dim3(unsigned(R)), dim3(kThreads), 0, stream(),
               static_cast<const __nv_bfloat16*>(a.logits.data()), V, params, adjust, a.workspace.data_as<float>(),
               a.tokens.data_as<int32_t>(), a.logprobs.data_as<float>(), a.top_ids.data_as<int32_t>(), pending,
               num_pending);
  else
    launch_pdl(sample_kernel<float>, dim3(unsigned(R)), dim3(kThreads), 0, stream(), a.logits.data_as<const float>(),
               V, params, adjust, a.workspace.data_as<float>(), a.tokens.data_as<int32_t>(),
               a.logprobs.data_as<float>(), a.top_ids.data_as<int32_t>(), pending, num_pending);
}

}  // namespace rill::cuda
