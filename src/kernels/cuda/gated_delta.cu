// kernels/cuda/gated_delta.cu — the gated delta rule (Gated DeltaNet's recurrence) on the GPU,
// state S [dk, dv] f32 per (slot, value head), maths in f32 (docs/models/qwen3_5.md, GDN section):
//   S ← e^g·S;  u = Sᵀk;  S += k ⊗ β(v − u);  o = Sᵀ(scale·q).
//
// Only the recurrent form exists here, and it evaluates every row length (decode, short rows and
// long prefill rows alike) token by token; DeltaRuleForm::chunked and ::automatic run it too. It is
// exact to f32 rounding (the CPU chunked form agrees to rounding), but a long prefill row is
// sequential over its tokens: a chunked (WY/UT-transform) kernel for rows > 16 tokens is not
// written yet.
//
// Layout: one block of 128 threads per (row, value head, slice of 16 dv columns). Within a warp,
// lane = 4·ag + jj: the warp owns 4 columns, and each of its 8 lane groups `ag` holds rows
// a = 8·i + ag (i < dk/8) of those columns in registers, so Sᵀk and Sᵀq reduce over 8 lanes by
// shuffles. Each token's q, k (dk), v slice, e^g and β are staged in shared memory, double
// buffered: the next token's values are loaded into registers while the current one computes.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kCols = 16;  // dv columns per block: 4 warps × 4

__device__ __forceinline__ void store_act(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_act(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
struct DeltaKernelArgs {
  const T* q;
  const T* k;
  const T* v;
  const float* g;
  const float* beta;
  float* state;
  T* out;
  StateRowsArgs rows;
  int hk, hv, dv;
  float scale;
};

template <typename T, int R>
__global__ void __launch_bounds__(kThreads) delta_rule_recurrent_kernel(DeltaKernelArgs<T> a) {
  constexpr int DK = 8 * R;
  constexpr int kLoads = (DK + kThreads - 1) / kThreads;
  __shared__ float sq[2][DK], sk[2][DK], sv[2][kCols], sg[2], sb[2];
  const int row = blockIdx.x, h = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, ag = lane >> 2, jc = warp * 4 + (lane & 3);
  const int j = blockIdx.z * kCols + jc;
  const bool col_ok = j < a.dv;
  const int64_t t0 = a.rows.cu_seqlens[row], t1 = a.rows.cu_seqlens[row + 1];
  const int slot = a.rows.slots[row];
  const bool has = a.rows.has_state[row] != 0;
  const int kh = h / (a.hv / a.hk);
  if (slot < 0 || slot >= a.rows.num_slots) {
    // No state to read or write: make the row's output loudly wrong instead of touching memory.
    if (ag == 0 && col_ok)
      for (int64_t t = t0; t < t1; ++t) store_act(a.out + (t * a.hv + h) * a.dv + j, NAN);
    return;
  }
  float* Sg = a.state + (int64_t(slot) * a.hv + h) * int64_t(DK) * a.dv;
  float S[R];
#pragma unroll
  for (int i = 0; i < R; ++i) S[i] = (has && col_ok) ? Sg[int64_t(i * 8 + ag) * a.dv + j] : 0.f;

  // Per-token inputs held in registers between the global load and the shared-memory store.
  float rq[kLoads], rk[kLoads], rv = 0.f, rg = 0.f, rb = 0.f;
  auto load = [&](int64_t t) {
    const T* qt = a.q + (t * a.hk + kh) * DK;
    const T* kt = a.k + (t * a.hk + kh) * DK;
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int e = tid + l * kThreads;
      rq[l] = e < DK ? to_float(qt[e]) * a.scale : 0.f;
      rk[l] = e < DK ? to_float(kt[e]) : 0.f;
    }
    if (tid < kCols) {
      const int jj = blockIdx.z * kCols + tid;
      rv = jj < a.dv ? to_float(a.v[(t * a.hv + h) * a.dv + jj]) : 0.f;
    }
    if (tid == 0) {
      rg = expf(a.g[t * a.hv + h]);
      rb = a.beta[t * a.hv + h];
    }
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int e = tid + l * kThreads;
      if (e < DK) {
        sq[buf][e] = rq[l];
        sk[buf][e] = rk[l];
      }
    }
    if (tid < kCols) sv[buf][tid] = rv;
    if (tid == 0) {
      sg[buf] = rg;
      sb[buf] = rb;
    }
  };

  if (t0 < t1) {
    load(t0);
    stage(0);
  }
  __syncthreads();
  for (int64_t t = t0; t < t1; ++t) {
    const int buf = int(t - t0) & 1;
    if (t + 1 < t1) load(t + 1);
    const float decay = sg[buf], beta = sb[buf];
    float u = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      S[i] *= decay;
      u += S[i] * sk[buf][i * 8 + ag];
    }
    u += __shfl_xor_sync(0xffffffffu, u, 4);
    u += __shfl_xor_sync(0xffffffffu, u, 8);
    u += __shfl_xor_sync(0xffffffffu, u, 16);
    const float d = beta * (sv[buf][jc] - u);
    float o = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      S[i] += sk[buf][i * 8 + ag] * d;
      o += S[i] * sq[buf][i * 8 + ag];
    }
    o += __shfl_xor_sync(0xffffffffu, o, 4);
    o += __shfl_xor_sync(0xffffffffu, o, 8);
    o += __shfl_xor_sync(0xffffffffu, o, 16);
    if (ag == 0 && col_ok) store_act(a.out + (t * a.hv + h) * a.dv + j, o);
    if (t + 1 < t1) stage(buf ^ 1);
    __syncthreads();
  }
  if (col_ok) {
#pragma unroll
    for (int i = 0; i < R; ++i) Sg[int64_t(i * 8 + ag) * a.dv + j] = S[i];
  }
}

template <typename T>
void launch_typed(const DeltaRuleArgs& a, cudaStream_t stream) {
  DeltaKernelArgs<T> k{static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.g,
                       a.beta, a.state, static_cast<T*>(a.out), a.rows, a.hk, a.hv, a.dv, a.scale};
  dim3 grid(unsigned(a.rows.num_rows), unsigned(a.hv), ceil_div(a.dv, kCols));
  switch (a.dk) {
    case 16: delta_rule_recurrent_kernel<T, 2><<<grid, kThreads, 0, stream>>>(k); break;
    case 32: delta_rule_recurrent_kernel<T, 4><<<grid, kThreads, 0, stream>>>(k); break;
    case 64: delta_rule_recurrent_kernel<T, 8><<<grid, kThreads, 0, stream>>>(k); break;
    case 128: delta_rule_recurrent_kernel<T, 16><<<grid, kThreads, 0, stream>>>(k); break;
    case 256: delta_rule_recurrent_kernel<T, 32><<<grid, kThreads, 0, stream>>>(k); break;
    default: throw_error("[gated_delta_rule] key head dim must be 16, 32, 64, 128 or 256");
  }
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_gated_delta_rule(const DeltaRuleArgs& a, cudaStream_t stream) {
  if (a.rows.num_rows == 0 || a.hv == 0 || a.dv == 0) return;
  if (a.act_dtype == DType::bf16) launch_typed<bf16>(a, stream);
  else if (a.act_dtype == DType::f32) launch_typed<float>(a, stream);
  else throw_error("[gated_delta_rule] activations must be bf16 or f32");
}

}  // namespace rill::cuda
