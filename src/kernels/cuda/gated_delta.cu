// kernels/cuda/gated_delta.cu — the gated delta rule (Gated DeltaNet's recurrence) on the GPU,
// state S [dk, dv] f32 per (slot, value head), maths in f32 (docs/models/qwen3_5.md, GDN section):
//   S ← e^g·S;  u = Sᵀk;  S += k ⊗ β(v − u);  o = Sᵀ(scale·q).
//
// The recurrent form, token by token. DeltaRuleForm::recurrent and ::automatic run it for every row
// length (decode, short rows and long prefill rows alike). It is exact to f32 rounding (the CPU
// chunked form agrees to rounding), but a long prefill row is sequential over its tokens: the
// chunked (UT-transform) kernel in gated_delta_chunked.cu runs DeltaRuleForm::chunked, and
// ::automatic moves to it for rows > 16 tokens once it is validated on hardware.
//
// Layout: one block of 128 threads per (row, value head, slice of 16 dv columns). Within a warp,
// lane = 4·ag + jj: the warp owns 4 columns, and each of its 8 lane groups `ag` holds rows
// a = 8·i + ag (i < dk/8) of those columns in registers, so Sᵀk and Sᵀq reduce over 8 lanes by
// shuffles. The inputs of 32 tokens at a time (16 when dk = 256) — q, k (dk), the v slice, e^g and
// β — are staged in shared memory with one barrier, so the token loop itself waits on no memory.
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
  int64_t min_row_tokens, max_row_tokens;
};

template <typename T, int R>
__global__ void __launch_bounds__(kThreads) delta_rule_recurrent_kernel(DeltaKernelArgs<T> a) {
  constexpr int DK = 8 * R;
  constexpr int kChunk = DK <= 128 ? 32 : 16;  // tokens staged at once (≤ 34 KB of shared memory)
  __shared__ float sq[kChunk][DK], sk[kChunk][DK], sv[kChunk][kCols], sg[kChunk], sb[kChunk];
  const int row = blockIdx.x, h = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, ag = lane >> 2, jc = warp * 4 + (lane & 3);
  const int j = blockIdx.z * kCols + jc;
  const bool col_ok = j < a.dv;
  const int64_t t0 = a.rows.cu_seqlens[row], t1 = a.rows.cu_seqlens[row + 1];
  if (t1 - t0 < a.min_row_tokens || t1 - t0 > a.max_row_tokens) return;  // the other kernel's row
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

  for (int64_t c0 = t0; c0 < t1; c0 += kChunk) {
    const int n = int(t1 - c0 < kChunk ? t1 - c0 : kChunk);
    // Stage the chunk's inputs (coalesced over each token's head vector).
    for (int e = tid; e < n * DK; e += kThreads) {
      const int i = e / DK, x = e - i * DK;
      const int64_t off = ((c0 + i) * a.hk + kh) * DK + x;
      sq[i][x] = to_float(a.q[off]) * a.scale;
      sk[i][x] = to_float(a.k[off]);
    }
    for (int e = tid; e < n * kCols; e += kThreads) {
      const int i = e / kCols, x = e - i * kCols, jj = blockIdx.z * kCols + x;
      sv[i][x] = jj < a.dv ? to_float(a.v[((c0 + i) * a.hv + h) * a.dv + jj]) : 0.f;
    }
    for (int i = tid; i < n; i += kThreads) {
      sg[i] = expf(a.g[(c0 + i) * a.hv + h]);
      sb[i] = a.beta[(c0 + i) * a.hv + h];
    }
    __syncthreads();
    for (int i = 0; i < n; ++i) {
      const float decay = sg[i], beta = sb[i];
      float u = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        S[r] *= decay;
        u += S[r] * sk[i][r * 8 + ag];
      }
      u += __shfl_xor_sync(0xffffffffu, u, 4);
      u += __shfl_xor_sync(0xffffffffu, u, 8);
      u += __shfl_xor_sync(0xffffffffu, u, 16);
      const float d = beta * (sv[i][jc] - u);
      float o = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        S[r] += sk[i][r * 8 + ag] * d;
        o += S[r] * sq[i][r * 8 + ag];
      }
      o += __shfl_xor_sync(0xffffffffu, o, 4);
      o += __shfl_xor_sync(0xffffffffu, o, 8);
      o += __shfl_xor_sync(0xffffffffu, o, 16);
      if (ag == 0 && col_ok) store_act(a.out + ((c0 + i) * a.hv + h) * a.dv + j, o);
    }
    __syncthreads();  // the next chunk overwrites the staged inputs
  }
  if (col_ok) {
#pragma unroll
    for (int i = 0; i < R; ++i) Sg[int64_t(i * 8 + ag) * a.dv + j] = S[i];
  }
}

template <typename T>
void launch_typed(const DeltaRuleArgs& a, cudaStream_t stream) {
  DeltaKernelArgs<T> k{static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), a.g,
                       a.beta, a.state, static_cast<T*>(a.out), a.rows, a.hk, a.hv, a.dv, a.scale,
                       a.min_row_tokens, a.max_row_tokens};
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
