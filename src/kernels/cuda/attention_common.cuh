// kernels/cuda/attention_common.cuh — what the paged attention kernels share (attention.cu: the
// mma.sync kernels of every schedule; attention_decode.cu: the four-warp decode kernels at one
// m-tile and the span combine; attention_wgmma.cu: the Hopper fold schedule at head_dim 128):
// kernel arguments, the span merge whose explicitly rounded operations make the schedules
// agree bit for bit, the masking and softmax of a tile, and the gather of K/V tiles through the
// block table (the mma.sync kernels; the warpgroup kernel's tiles arrive by tensor copies).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

namespace rill::cuda::attention_detail {

// Byte offset of row r, 16-byte chunk c (8 dims) in a [rows × D] bf16 tile kept as 64-dim blocks of
// rows × 128 bytes with the 128-byte swizzle (wgmma.cuh): chunk c % 8 of the row sits at (c % 8) ^ (r % 8).
__host__ __device__ constexpr uint32_t swizzled_offset(int rows, int r, int c) {
  return uint32_t((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

constexpr float kLog2e = 1.4426950408889634f;
// Invariant mode: KV positions per span (a multiple of every tile): 64 (one tile) at head_dim
// ≤ 128, 256 at head_dim 256 (see run_attention_invariant); AttentionArgs::span_keys overrides.
constexpr int kSpanKeys = 64;  // the default; AttentionArgs::span_keys (a multiple of it) overrides

// 2^x in one instruction (MUFU.EX2, results below 2^-126 flushed to zero: softmax weights that
// small do not matter). Every kernel of the invariant schedules uses this one, so they agree.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Folds one span's partial (o, m, l) of a row into the running (acc_o, acc_m, acc_l), the span
// skipped when it saw no key (m = -inf). Explicitly rounded ops (one product rounded, then one
// fused multiply-add): the attention kernels (fold schedule) and the combine kernel (split
// schedule) must produce the same bits.
struct SpanMerge {
  float a, b;
  __device__ __forceinline__ static SpanMerge make(float& acc_m, float& acc_l, float m, float l) {
    const float m_new = fmaxf(acc_m, m);
    SpanMerge w{exp2_ftz(acc_m - m_new), exp2_ftz(m - m_new)};
    acc_l = __fmaf_rn(acc_l, w.a, __fmul_rn(l, w.b));
    acc_m = m_new;
    return w;
  }
  __device__ __forceinline__ float apply(float acc_o, float o) const { return __fmaf_rn(acc_o, a, __fmul_rn(o, b)); }
};
__device__ __forceinline__ float span_result(float acc_o, float acc_l) {
  return acc_l > 0.f ? __fdiv_rn(acc_o, acc_l) : 0.f;
}

struct AttnKernelArgs {
  const bf16* q;
  const bf16* k_cache;
  const bf16* v_cache;
  bf16* out;
  const int32_t* cu_seqlens_q;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int64_t tokens;
  int hq, hkv, group;
  int block_size, block_shift, max_blocks_per_row;  // block_shift: log2(block_size) or -1
  float scale;
  float softcap;
  int window;
  int splits;
  int span_tiles;  // invariant mode: tiles per span (0: legacy equal splits of the row's tiles)
  int span_step;   // the invariant decode split kernel: blocks a (row, m-tile, kv head); each walks every step-th span
  float* part_o;   // [splits, tokens, hq, D] when splits > 1
  float* part_ml;  // [splits, tokens, hq, 2]
  bool early_trigger;  // pdl_attention_early_trigger() (the decode split kernel)
  bool rope_fused;     // the decode split / cluster kernels run `rope` (AttentionArgs::rope) first
  RopeArgs rope;
};

template <int D, int kWarps, int kBN>
struct AttnConfig {
  static constexpr int kBM = 16 * kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStride = D + 8;  // +16 bytes per row: conflict-free ldmatrix
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr bool kQInRegs = D <= 128;
  static constexpr size_t kSmemBytes = size_t(kBM + 2 * kBN) * kStride * sizeof(bf16);
};

// The cache slots of the key rows this thread copies for one tile (-1: past kv_end, zero-fill).
// All block-table reads are issued before any copy, so a tile costs one table round trip. A
// thread always copies the same 16-byte chunk column (kThreads is a multiple of kChunks), so its
// source offset inside a slot is fixed; power-of-two block sizes avoid integer division.
template <int D, int kBN, int kThreads>
struct TileSlots {
  static constexpr int kChunks = D / 8;
  static constexpr int kIters = kBN * kChunks / kThreads;
  static constexpr int kRowsPerIter = kThreads / kChunks;
  static_assert(kBN * kChunks % kThreads == 0 && kThreads % kChunks == 0, "tile chunks must divide over the threads");
  int32_t slot[kIters];

  __device__ __forceinline__ void load(const int32_t* table, int block_size, int block_shift, int tile_start,
                                       int kv_end) {
    const int r0 = int(threadIdx.x) / kChunks;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      int kp = tile_start + r0 + it * kRowsPerIter;
      int32_t s = -1;
      if (kp < kv_end) {
        if (block_shift >= 0) s = (__ldg(table + (kp >> block_shift)) << block_shift) | (kp & (block_size - 1));
        else s = __ldg(table + kp / block_size) * block_size + kp % block_size;
      }
      slot[it] = s;
    }
  }

  // Copies the tile of one kv head from `cache` into smem rows of D + 8 elements; with kHint, the
  // copies carry the L2 policy `policy` (the decode kernel's K/V: read once a step).
  template <bool kHint = false>
  __device__ __forceinline__ void copy(bf16* smem, const bf16* cache, int64_t slot_stride, int kvh,
                                       uint64_t policy = 0) const {
    const int r0 = int(threadIdx.x) / kChunks, c = int(threadIdx.x) % kChunks;
    const bf16* base = cache + kvh * D + c * 8;
    bf16* dst = smem + r0 * (D + 8) + c * 8;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const bool ok = slot[it] >= 0;
      const bf16* src = ok ? base + slot[it] * slot_stride : cache;
      if constexpr (kHint) cp_async16(dst + it * kRowsPerIter * (D + 8), src, ok, policy);
      else cp_async16(dst + it * kRowsPerIter * (D + 8), src, ok);
    }
  }
};

// ---- One K/V tile of a warp's 16 query rows (the C fragments of mma.sync m16n8k16: this thread
// holds rows g and g + 8 — h = 0, 1 — and, per 8 keys or dims, columns 2·tig and 2·tig + 1) ----

// A block's share of one row: packed query rows [m0, m0 + kBM) (packed row m is query token m /
// group; blocks in reverse order, so the heavy late rows start first under causality), the
// positions they sit at, and the K/V tiles [t_lo, t_hi) of kBN keys they see.
struct BlockRows {
  int q_begin, q_len, ctx, packed, m0, pos0, qi_first, qi_last, kv_end, t_lo, t_hi;

  // False when the block has no rows (m0 past the row's packed queries).
  __device__ __forceinline__ bool init(const AttnKernelArgs& a, int row, int kBM, int kBN) {
    q_begin = a.cu_seqlens_q[row];
    q_len = a.cu_seqlens_q[row + 1] - q_begin;
    ctx = a.context_lens[row];
    packed = q_len * a.group;
    m0 = (int(gridDim.x) - 1 - int(blockIdx.x)) * kBM;
    if (m0 >= packed) return false;
    pos0 = ctx - q_len;  // absolute position of the row's first new token
    qi_first = m0 / a.group;
    qi_last = (min(m0 + kBM, packed) - 1) / a.group;
    kv_end = min(ctx, pos0 + qi_last + 1);
    const int kv_lo = a.window > 0 ? max(0, pos0 + qi_first - a.window + 1) : 0;
    t_lo = kv_lo / kBN;
    t_hi = kv_end > 0 ? (kv_end + kBN - 1) / kBN : t_lo;
    return true;
  }
  // No key of the tile at tile_start is masked for any row of the block.
  __device__ __forceinline__ bool full_tile(const AttnKernelArgs& a, int tile_start, int kBN) const {
    return tile_start + kBN <= pos0 + qi_first + 1 && tile_start + kBN <= ctx &&
           (a.window <= 0 || tile_start > pos0 + qi_last - a.window);
  }
};

// Per-row state of a warp's rows: the query positions and whether the packed row exists.
struct RowPos {
  int qpos[2];
  bool ok[2];

  // Rows g and g + 8 of warp `warp` (16 rows a warp from the block's m0).
  __device__ __forceinline__ static RowPos of(const BlockRows& br, const AttnKernelArgs& a, int warp, int g) {
    RowPos rp;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = br.m0 + warp * 16 + g + h * 8;
      rp.ok[h] = m < br.packed;
      rp.qpos[h] = br.pos0 + (rp.ok[h] ? m / a.group : 0);
    }
    return rp;
  }
};

// Scores in log2 units: s·scale (or softcap·tanh(s·scale / softcap)) · log2(e), -inf where the key
// is masked (causal, past the context, outside the window). `full`: no key of the tile is masked
// for any row of the block — the common case, which then runs no masking code at all: the mask is
// one branch around the whole tile (a condition per score, merged with `full`, made the compiler
// predicate ~150 instructions into every tile of the prefill kernel). kCap: whether a softcap
// applies — 0 no, 1 yes, 2 read from the arguments (a kernel compiled for one case carries no code
// for the other).
template <int kBN>
__device__ __forceinline__ void mask_tile(float (&s)[kBN / 8][4], const AttnKernelArgs& a, const RowPos& rp,
                                          int tile_start, int ctx, int tig) {
  // Key kp = base + j of row h is kept iff lo[h] ≤ j < hi[h]: kp ≤ qpos, kp < ctx and, with a
  // window, kp > qpos - window (the row's conditions as offsets from this thread's first key).
  const int base = tile_start + 2 * tig;
  int lo[2], hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    hi[h] = rp.ok[h] ? min(rp.qpos[h] + 1, ctx) - base : 0;
    lo[h] = a.window > 0 ? rp.qpos[h] - a.window + 1 - base : 0;
  }
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2, j = nt * 8 + (e % 2);
      if (j < lo[h] || j >= hi[h]) s[nt][e] = -INFINITY;
    }
}

template <int kBN, int kCap = 2>
__device__ __forceinline__ void scale_and_mask(float (&s)[kBN / 8][4], const AttnKernelArgs& a, const RowPos& rp,
                                               int tile_start, int ctx, bool full, int tig) {
  const float scale_log2 = a.scale * kLog2e;
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (kCap == 1 || (kCap == 2 && a.softcap > 0.f))
        s[nt][e] = a.softcap * tanhf(s[nt][e] * a.scale / a.softcap) * kLog2e;
      else s[nt][e] *= scale_log2;
    }
  if (!full) mask_tile<kBN>(s, a, rp, tile_start, ctx, tig);
}

// Online softmax over one tile: the rows' running max and (per-thread partial) sum advance, s
// becomes p = 2^(s - max), and alpha is the factor for what was accumulated before this tile.
// Max and sum are pairwise trees over the thread's values (short dependency chains: a warp
// waits less between instructions); the sum's order is part of the arithmetic, the same in
// every kernel.
template <int kBN>
__device__ __forceinline__ void softmax_tile(float (&s)[kBN / 8][4], float (&row_max)[2], float (&row_sum)[2],
                                             float (&alpha)[2]) {
  constexpr int kTiles = kBN / 8;
  static_assert((kTiles & (kTiles - 1)) == 0, "a power-of-two number of 8-key tiles");
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float t[kTiles];
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) t[nt] = fmaxf(s[nt][2 * h], s[nt][2 * h + 1]);
#pragma unroll
    for (int w = kTiles / 2; w >= 1; w /= 2)
#pragma unroll
      for (int i = 0; i < w; ++i) t[i] = fmaxf(t[i], t[i + w]);
    float mx = t[0];
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(row_max[h], mx);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    alpha[h] = exp2_ftz(row_max[h] - m_use);
    row_max[h] = m_new;
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
      s[nt][2 * h] = exp2_ftz(s[nt][2 * h] - m_use);
      s[nt][2 * h + 1] = exp2_ftz(s[nt][2 * h + 1] - m_use);
      t[nt] = __fadd_rn(s[nt][2 * h], s[nt][2 * h + 1]);
    }
#pragma unroll
    for (int w = kTiles / 2; w >= 1; w /= 2)
#pragma unroll
      for (int i = 0; i < w; ++i) t[i] = __fadd_rn(t[i], t[i + w]);
    row_sum[h] = __fmaf_rn(row_sum[h], alpha[h], t[0]);
  }
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    o[dt][0] *= alpha[0];
    o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1];
    o[dt][3] *= alpha[1];
  }
}

// P of 16 keys (n-tiles 2kk, 2kk + 1) as the A fragment of a k16 step: the C layout of two adjacent
// n-tiles is the A layout of one k-step.
template <int kBN>
__device__ __forceinline__ void p_fragment(uint32_t (&pf)[4], const float (&s)[kBN / 8][4], int kk) {
  pf[0] = float2_to_bf16x2(s[2 * kk][0], s[2 * kk][1]);
  pf[1] = float2_to_bf16x2(s[2 * kk][2], s[2 * kk][3]);
  pf[2] = float2_to_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  pf[3] = float2_to_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// A span ended (fold schedule): its partial (o, row_max, row_sum) is merged into the running
// (acc_o, acc_m, acc_l) with the combine kernel's operations, then restarted (o zeroed unless kZeroO
// is false: a caller that zeroes o itself before the next span's first product).
template <int D, bool kZeroO = true>
__device__ __forceinline__ void fold_span(float (&acc_o)[D / 8][4], float (&acc_m)[2], float (&acc_l)[2],
                                          float (&o)[D / 8][4], float (&row_max)[2], float (&row_sum)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    if (row_max[h] != -INFINITY) {
      SpanMerge w = SpanMerge::make(acc_m[h], acc_l[h], row_max[h], row_sum[h]);
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        acc_o[dt][2 * h] = w.apply(acc_o[dt][2 * h], o[dt][2 * h]);
        acc_o[dt][2 * h + 1] = w.apply(acc_o[dt][2 * h + 1], o[dt][2 * h + 1]);
      }
    }
    row_max[h] = -INFINITY;
    row_sum[h] = 0.f;
  }
  if constexpr (kZeroO) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  }
}

// The fold schedule's output: packed row m → token q_begin + m / group, head kvh · group + m % group.
template <int D>
__device__ __forceinline__ void store_folded(const AttnKernelArgs& a, const float (&acc_o)[D / 8][4],
                                             const float (&acc_l)[2], const RowPos& rp, int m_row0, int q_begin,
                                             int kvh, int tig) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!rp.ok[h]) continue;
    const int m = m_row0 + h * 8;
    const int64_t token = q_begin + m / a.group;
    const int head = kvh * a.group + m % a.group;
    bf16* dst = a.out + (token * a.hq + head) * D + tig * 2;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(dst + dt * 8) =
          float2_to_bf16x2(span_result(acc_o[dt][2 * h], acc_l[h]), span_result(acc_o[dt][2 * h + 1], acc_l[h]));
  }
}

// The fold schedule on warpgroup MMA (attention_wgmma.cu): head_dim 128, 128 packed query rows a
// block (two warpgroups of 64), the same bits as attention_kernel's fold and split schedules.
// K/V tiles arrive by tensor copies: caches of power-of-two blocks of ≥ 8 slots (attention_wgmma_fits;
// the mma.sync fold kernel, same bits, runs the others).
bool attention_wgmma_available();
bool attention_wgmma_fits(const AttnKernelArgs& k, int64_t num_slots);
uint64_t attention_wgmma_launches();
void launch_attention_wgmma(const AttnKernelArgs& k, unsigned m_tiles, int hkv, int num_rows, int64_t num_slots,
                            cudaStream_t stream);

// Invariant decode, split schedule, at most 16 packed query rows (one m-tile): the work of
// attention_kernel<D, 1, 64, false> spread over four warps of one block, with its bits. One warp
// ran a span's whole chain (the copies' addressing for 64 rows, two 64-mma chains, the softmax:
// 254 registers, 5 warps an SM, 0.14 eligible a scheduler, 1.03 TB/s of KV at 8k context). Here
// warp w computes Q·Kᵀ for keys 16w..16w+15 (n-tiles 2w, 2w+1: an n-tile's k chain is unchanged),
// the softmax's row max is combined across warps in shared memory (max is exact), the row sum's
// pairwise tree over the 8 n-tiles runs in warp 0 on values gathered in shared memory (the same
// tree, the same order), P goes through shared memory as the bf16 A fragments each warp would
// have built, and warp w computes P·V for output dims 32w..32w+31 (D = 128) over the k16 steps in
// order. Each output element sees the operations of the one-warp kernel.
template <int D>
struct DecodeSplitCfg {
  static constexpr int kBN = 64, kBM = 16, kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int kStride = D + 8, kChunks = D / 8;
  static constexpr int kNT = kBN / 8, kNTw = kNT / kWarps;  // 8-key n-tiles of S: all, a warp's
  static constexpr int kDT2w = D / 16 / kWarps;              // 16-dim output pairs a warp
  static_assert(kNTw == 2 && kDT2w >= 1, "head_dim 64 or 128, 64-key tiles");
  static constexpr size_t kTileBytes = size_t(kBN) * kStride * sizeof(bf16);
  static constexpr size_t kQBytes = size_t(kBM) * kStride * sizeof(bf16);
  // Shared memory: Q, K, V tiles, then the exchange: row max [warp][h][g], the sum terms
  // [n-tile][h][lane], P as bf16 pairs [n-tile][lane].
  static constexpr size_t kMaxOff = kQBytes + 2 * kTileBytes;
  static constexpr size_t kSumOff = kMaxOff + size_t(kWarps) * 2 * 8 * sizeof(float);
  static constexpr size_t kPOff = kSumOff + size_t(kNT) * 2 * 32 * sizeof(float);
  static constexpr size_t kLOff = kPOff + size_t(kNT) * 32 * sizeof(uint2);  // the fold's row sums [kBM]
  static constexpr size_t kSmemBytes = kLOff + size_t(kBM) * sizeof(float);
};

// attention_decode.cu's launches (host). The invariant split schedule at one m-tile, D 64 or 128:
// the cluster kernel, the four-warp split kernel and the span combine, or the fold kernel where a
// block would walk every span (grid: the split grid, m-tiles × kv heads × rows · spans; k with the
// workspace's partials set).
template <int D>
void launch_decode_split(const AttnKernelArgs& k, const AttentionArgs& a, dim3 grid, int64_t spans, int span_keys,
                         cudaStream_t stream);
// The four-warp fold kernel at one m-tile (D 64 or 128): a block a (row, kv head), every span in order.
template <int D>
void launch_decode_fold(const AttnKernelArgs& k, const AttentionArgs& a, cudaStream_t stream);
// The span combine after a split schedule's partials (D 16, 32, 64, 128 or 256).
// spans: the block table's (graph-stable), which picks the combine's chunk (32, 128 or 256 spans).
template <int D>
void launch_combine_spans(const AttnKernelArgs& k, const AttentionArgs& a, int64_t spans, int span_keys,
                          cudaStream_t stream);
// launch_attention starts by clearing what attention_ended_with_combine reports (ops.h).
void clear_ended_with_combine();

}  // namespace rill::cuda::attention_detail
