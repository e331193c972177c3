// kernels/cuda/gated_delta_chunked.cu — the chunked form of the gated delta rule on the GPU, for
// prefill rows (DeltaRuleForm::chunked; issue #7).
//
// NOT YET VALIDATED ON HARDWARE. This kernel was written and compiled without a GPU: it has never
// run. The tests that validate it are in tests/kernels/cuda/gdn_test.cpp (CudaGatedDeltaChunked.*:
// against the recurrent kernel and the CPU chunked op on ragged rows of 1, 63, 64, 65, 300 and 1000
// tokens). Until they pass, only DeltaRuleForm::chunked selects this kernel and
// DeltaRuleForm::automatic stays on the recurrent kernel (gated_delta.cu) for every row length;
// once they pass, `automatic` switches to this kernel for rows of more than 16 tokens, as the CPU
// backend does.
//
// Maths (docs/models/qwen3_5.md, GDN section; the oracle is the CPU chunked form in
// kernels/cpu/gated_delta.cpp), per (row, value head), chunks of C ≤ 64 tokens, γ the in-chunk
// cumulative sum of g (accumulated in double, as on the CPU), state S [dk, dv] f32 carried across
// chunks:
//   A[i,j] = β_i (k_i·k_j) e^{γ_i−γ_j} (j < i)
//   R_i    = β_i (v_i − e^{γ_i} k_i·S)
//   Vn     = (I+A)⁻¹ R                       (forward substitution in f32)
//   O_i    = e^{γ_i} q_i·S + Σ_{j≤i} (q_i·k_j) e^{γ_i−γ_j} Vn_j
//   S      ← e^{γ_C} S + Σ_j e^{γ_C−γ_j} k_j ⊗ Vn_j
// This equals the CPU form (U = (I+A)⁻¹βV, W = (I+A)⁻¹(βe^γ⊙K), Vn = U − W·S) by linearity of
// (I+A)⁻¹, without materialising W. All products are f32 FMA (correctness first: no tensor cores
// yet). Activations (bf16 or f32) are read as f32, q is scaled on load, and the output is rounded
// once at the store, as in the recurrent kernel.
//
// Layout: one block of 256 threads per (row, value head, slice of kCols dv columns: 32, or 16 when
// dk = 256), everything of a chunk in shared memory: q and k [C, dk] (rows padded to dk+1 floats),
// the state slice [dk, kCols], A and P = decayed q·kᵀ [C, C+1], and R/Vn [C, kCols] — 186 KB at
// dk = 256, 125 KB at dk = 128. A and the k·S part of R are built by all threads; then warp 0
// solves the triangular system column by column while the other warps build P; then the output
// rows and the state update. A, P and the chunk's k·kᵀ / q·kᵀ are recomputed by each dv slice.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxChunk = 64;

__device__ __forceinline__ void store_act(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_act(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

template <int DK>
struct ChunkedConfig {
  static constexpr int kCols = DK >= 256 ? 16 : 32;  // dv columns per block
  static constexpr int kLdK = DK + 1;                // q/k row stride (floats): conflict-free column reads
  static constexpr int kLdA = kMaxChunk + 1;         // A/P row stride
  static constexpr size_t kSmemBytes =
      kMaxChunk * sizeof(double) +
      sizeof(float) * (3 * kMaxChunk + 2 * kMaxChunk * kLdK + DK * kCols + 2 * kMaxChunk * kLdA + kMaxChunk * kCols);
};

template <typename T, int DK>
__global__ void __launch_bounds__(kThreads) delta_rule_chunked_kernel(DeltaRuleArgs a) {
  using Cfg = ChunkedConfig<DK>;
  constexpr int kCols = Cfg::kCols, LK = Cfg::kLdK, LA = Cfg::kLdA;
  extern __shared__ __align__(16) unsigned char smem[];
  double* s_gam = reinterpret_cast<double*>(smem);  // γ_i
  float* s_beta = reinterpret_cast<float*>(s_gam + kMaxChunk);
  float* s_eg = s_beta + kMaxChunk;    // e^{γ_i}
  float* s_dec = s_eg + kMaxChunk;     // e^{γ_last − γ_i}
  float* s_k = s_dec + kMaxChunk;      // [C][LK]
  float* s_q = s_k + kMaxChunk * LK;   // [C][LK], scaled
  float* s_S = s_q + kMaxChunk * LK;   // [DK][kCols]
  float* s_A = s_S + DK * kCols;       // [C][LA], strictly lower
  float* s_P = s_A + kMaxChunk * LA;   // [C][LA], lower incl. diagonal
  float* s_R = s_P + kMaxChunk * LA;   // [C][kCols]: v, then R, then Vn

  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  T* out = static_cast<T*>(a.out);
  const int row = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int j0 = blockIdx.z * kCols;
  const int64_t t0 = a.rows.cu_seqlens[row], t1 = a.rows.cu_seqlens[row + 1];
  if (t1 - t0 < a.min_row_tokens || t1 - t0 > a.max_row_tokens) return;  // the other kernel's row
  const int slot = a.rows.slots[row];
  const bool has = a.rows.has_state[row] != 0;
  const int kh = h / (a.hv / a.hk);
  const int chunk = a.chunk < 1 ? 1 : (a.chunk > kMaxChunk ? kMaxChunk : a.chunk);
  if (slot < 0 || slot >= a.rows.num_slots) {
    // No state to read or write: make the row's output loudly wrong instead of touching memory.
    for (int64_t e = tid; e < (t1 - t0) * kCols; e += kThreads) {
      const int64_t t = t0 + e / kCols;
      const int jj = j0 + int(e % kCols);
      if (jj < a.dv) store_act(out + (t * a.hv + h) * a.dv + jj, NAN);
    }
    return;
  }
  float* Sg = a.state + (int64_t(slot) * a.hv + h) * int64_t(DK) * a.dv;
  for (int e = tid; e < DK * kCols; e += kThreads) {
    const int x = e / kCols, jj = j0 + e % kCols;
    s_S[e] = (has && jj < a.dv) ? Sg[int64_t(x) * a.dv + jj] : 0.f;
  }

  for (int64_t c0 = t0; c0 < t1; c0 += chunk) {
    const int n = int(t1 - c0 < chunk ? t1 - c0 : chunk);
    // 1. Stage the chunk's inputs (coalesced over each token's head vector) and γ.
    for (int e = tid; e < n * DK; e += kThreads) {
      const int i = e / DK, x = e - i * DK;
      const int64_t off = ((c0 + i) * a.hk + kh) * DK + x;
      s_q[i * LK + x] = to_float(q[off]) * a.scale;
      s_k[i * LK + x] = to_float(k[off]);
    }
    for (int e = tid; e < n * kCols; e += kThreads) {
      const int i = e / kCols, jj = j0 + e % kCols;
      s_R[e] = jj < a.dv ? to_float(v[((c0 + i) * a.hv + h) * a.dv + jj]) : 0.f;
    }
    for (int i = tid; i < n; i += kThreads) s_beta[i] = a.beta[(c0 + i) * a.hv + h];
    if (tid == 0) {
      double acc = 0.0;
      for (int i = 0; i < n; ++i) s_gam[i] = acc += double(a.g[(c0 + i) * a.hv + h]);
    }
    __syncthreads();  // also orders the state load (first chunk) and the previous chunk's update

    // 2. A (strictly lower), R = β(v − e^γ k·S), the decay factors.
    for (int e = tid; e < n * n; e += kThreads) {
      const int i = e / n, j = e - i * n;
      if (j >= i) continue;
      const float* ki = s_k + i * LK;
      const float* kj = s_k + j * LK;
      float dot = 0.f;
#pragma unroll 8
      for (int x = 0; x < DK; ++x) dot = fmaf(ki[x], kj[x], dot);
      s_A[i * LA + j] = s_beta[i] * dot * expf(float(s_gam[i] - s_gam[j]));
    }
    for (int e = tid; e < n * kCols; e += kThreads) {
      const int i = e / kCols, c = e - i * kCols;
      const float* ki = s_k + i * LK;
      float ks = 0.f;
#pragma unroll 8
      for (int x = 0; x < DK; ++x) ks = fmaf(ki[x], s_S[x * kCols + c], ks);
      s_R[e] = s_beta[i] * (s_R[e] - expf(float(s_gam[i])) * ks);
    }
    for (int i = tid; i < n; i += kThreads) {
      s_eg[i] = expf(float(s_gam[i]));
      s_dec[i] = expf(float(s_gam[n - 1] - s_gam[i]));
    }
    __syncthreads();

    // 3. Vn = (I+A)⁻¹R by forward substitution, one column per thread of warp 0 (rows in order,
    //    in place: row i reads the finished rows j < i of its own column); the other warps build
    //    P[i,j] = (q_i·k_j) e^{γ_i−γ_j} for j ≤ i meanwhile.
    if (tid < 32) {
      if (tid < kCols) {
        const int c = tid;
        for (int i = 1; i < n; ++i) {
          const float* Ai = s_A + i * LA;
          float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
          int j = 0;
          for (; j + 4 <= i; j += 4) {
            acc0 = fmaf(Ai[j], s_R[j * kCols + c], acc0);
            acc1 = fmaf(Ai[j + 1], s_R[(j + 1) * kCols + c], acc1);
            acc2 = fmaf(Ai[j + 2], s_R[(j + 2) * kCols + c], acc2);
            acc3 = fmaf(Ai[j + 3], s_R[(j + 3) * kCols + c], acc3);
          }
          for (; j < i; ++j) acc0 = fmaf(Ai[j], s_R[j * kCols + c], acc0);
          s_R[i * kCols + c] -= (acc0 + acc1) + (acc2 + acc3);
        }
      }
    } else {
      for (int e = tid - 32; e < n * n; e += kThreads - 32) {
        const int i = e / n, j = e - i * n;
        if (j > i) continue;
        const float* qi = s_q + i * LK;
        const float* kj = s_k + j * LK;
        float dot = 0.f;
#pragma unroll 8
        for (int x = 0; x < DK; ++x) dot = fmaf(qi[x], kj[x], dot);
        s_P[i * LA + j] = dot * expf(float(s_gam[i] - s_gam[j]));
      }
    }
    __syncthreads();

    // 4. Outputs: O_i = e^{γ_i} q_i·S (the state entering the chunk) + Σ_{j≤i} P_ij Vn_j.
    for (int e = tid; e < n * kCols; e += kThreads) {
      const int i = e / kCols, c = e - i * kCols, jj = j0 + c;
      const float* qi = s_q + i * LK;
      float inter = 0.f;
#pragma unroll 8
      for (int x = 0; x < DK; ++x) inter = fmaf(qi[x], s_S[x * kCols + c], inter);
      const float* Pi = s_P + i * LA;
      float intra = 0.f;
      for (int j = 0; j <= i; ++j) intra = fmaf(Pi[j], s_R[j * kCols + c], intra);
      if (jj < a.dv) store_act(out + ((c0 + i) * a.hv + h) * a.dv + jj, fmaf(s_eg[i], inter, intra));
    }
    __syncthreads();  // step 5 overwrites the state step 4 read

    // 5. S ← e^{γ_last} S + Σ_j e^{γ_last−γ_j} k_j ⊗ Vn_j.
    const float e_last = s_eg[n - 1];
    for (int e = tid; e < DK * kCols; e += kThreads) {
      const int x = e / kCols, c = e - x * kCols;
      float acc = 0.f;
      for (int j = 0; j < n; ++j) acc = fmaf(s_dec[j] * s_k[j * LK + x], s_R[j * kCols + c], acc);
      s_S[e] = fmaf(e_last, s_S[e], acc);
    }
    __syncthreads();  // the next chunk overwrites the staged inputs
  }
  for (int e = tid; e < DK * kCols; e += kThreads) {
    const int x = e / kCols, jj = j0 + e % kCols;
    if (jj < a.dv) Sg[int64_t(x) * a.dv + jj] = s_S[e];
  }
}

template <typename T, int DK>
void launch_dk(const DeltaRuleArgs& a, cudaStream_t stream) {
  using Cfg = ChunkedConfig<DK>;
  static const bool attr_set = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(delta_rule_chunked_kernel<T, DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(Cfg::kSmemBytes)));
    return true;
  }();
  (void)attr_set;
  dim3 grid(unsigned(a.rows.num_rows), unsigned(a.hv), ceil_div(a.dv, Cfg::kCols));
  delta_rule_chunked_kernel<T, DK><<<grid, kThreads, Cfg::kSmemBytes, stream>>>(a);
  RILL_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_typed(const DeltaRuleArgs& a, cudaStream_t stream) {
  switch (a.dk) {
    case 16: launch_dk<T, 16>(a, stream); break;
    case 32: launch_dk<T, 32>(a, stream); break;
    case 64: launch_dk<T, 64>(a, stream); break;
    case 128: launch_dk<T, 128>(a, stream); break;
    case 256: launch_dk<T, 256>(a, stream); break;
    default: throw_error("[gated_delta_rule] key head dim must be 16, 32, 64, 128 or 256");
  }
}

}  // namespace

void launch_gated_delta_rule_chunked(const DeltaRuleArgs& a, cudaStream_t stream) {
  if (a.rows.num_rows == 0 || a.hv == 0 || a.dv == 0) return;
  if (a.chunk < 1 || a.chunk > kMaxChunk) throw_error("[gated_delta_rule] chunked kernel: chunk must be in [1, 64]");
  if (a.act_dtype == DType::bf16) launch_typed<bf16>(a, stream);
  else if (a.act_dtype == DType::f32) launch_typed<float>(a, stream);
  else throw_error("[gated_delta_rule] activations must be bf16 or f32");
}

}  // namespace rill::cuda
