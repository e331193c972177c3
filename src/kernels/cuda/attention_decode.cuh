// kernels/cuda/attention_decode.cuh — the invariant decode attention's span walk for one m-tile
// (≤ 16 packed query rows) on four warps: Q·Kᵀ split by keys, the softmax's row max combined across
// warps, its row sum's tree in warp 0, P·V split by output dims (attention_common.cuh's
// DecodeSplitCfg). The split, cluster and fold kernels of attention.cu are instantiations of it.
// Device code, included by attention.cu.
#pragma once

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_rope.cuh"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"

namespace rill::cuda::attention_detail {

// The spans of one block: first, first + step, ... of its row; each span's partial goes to the
// workspace or, kToSmem (the cluster kernel: one span a block), to this block's shared memory
// over K's tile ([kBM][D] o, then [kBM] (m, l)). Returns whether the block had a span.
//
// kFold (attention_decode_fold_kernel: first 0, step 1 — the block walks every span of its row in
// order): instead of writing a span's partial, merge it into the block's running (o, m, l) with the
// fold schedule's operations (fold_span: SpanMerge in span order, fully masked spans skipped) and
// store the normalized output at the end (store_folded's): attention_kernel's fold schedule, with
// its bits, a span on four warps.
//
// rows_s (kToSmem): thread 0 leaves the block's (m0, packed, q_begin) there, m0 -1 without rows —
// read before the wait, so that the cluster kernel's fold needs no load of the step's lengths after
// it (the wait drops L1: a round trip behind the next GEMM's weight burst, ~0.7 µs; run AD2).
#if defined(RILL_PDL_TRACE)
// Trace builds: each cluster block's times of its Q and first tile landing and of its span's end (0: no
// span), which block (0, 0, 0) of the cluster kernel reads after the barrier (attention_decode.cu).
namespace {
__shared__ unsigned long long g_cluster_trace_times[2];
}  // namespace
#endif

template <int D, bool kToSmem, bool kRope = false, bool kFold = false>
__device__ __forceinline__ bool decode_split_spans(const AttnKernelArgs& a, unsigned char* smem_raw, int row,
                                                   int first, int* rows_s = nullptr) {
  using C = DecodeSplitCfg<D>;
  constexpr int kBM = C::kBM, kBN = C::kBN, kStride = C::kStride, kThreads = C::kThreads;
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* k_s = q_s + kBM * kStride;
  bf16* v_s = k_s + kBN * kStride;
  float* max_s = reinterpret_cast<float*>(smem_raw + C::kMaxOff);
  float* sum_s = reinterpret_cast<float*>(smem_raw + C::kSumOff);
  uint2* p_s = reinterpret_cast<uint2*>(smem_raw + C::kPOff);

  // The block walks spans first, first + step, ... of its (row, kv head): a span's partial is
  // computed from scratch whichever block runs it, so the walk changes no bit; step is sized so
  // that the grid is one wave of resident blocks (span_step), and the next span's K is requested
  // while this one's softmax and P·V run.
  const int step = a.span_step, st = a.span_tiles;
  const int kvh = blockIdx.y;
  // Before the wait (launch.h): the step's lengths and block table (uploaded before its first
  // kernel) and, when every key of the first tile precedes the row's new tokens, its K and V —
  // rows written by earlier steps, which no kernel of this step writes. Only Q (and the K/V of
  // the span holding this step's keys, written by the RoPE kernel) waits for the predecessors.
  warm_params(a);  // (a is every caller's __grid_constant__ parameter)
  BlockRows br;
  const bool has_rows = br.init(a, row, kBM, kBN);
  if constexpr (kToSmem) {
    if (threadIdx.x == 0) {
      rows_s[0] = has_rows ? br.m0 : -1;
      rows_s[1] = br.packed;
      rows_s[2] = br.q_begin;
    }
  }
  int span = first;
  if (has_rows && (span + 1) * st <= br.t_lo)  // the first of the block's spans holding a key the rows see
    span += (br.t_lo / st - span + step - 1) / step * step;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  // The fold's running merge of the spans so far (this warp's output dims), and its store.
  float acc_o[kFold ? 2 * C::kDT2w : 1][4];
  float acc_m[2] = {-INFINITY, -INFINITY}, acc_l[2] = {0.f, 0.f};
  if constexpr (kFold) {
#pragma unroll
    for (int i = 0; i < 2 * C::kDT2w; ++i) acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.f;
  }
  auto store_fold = [&](const RowPos& rp) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!rp.ok[h]) continue;
      const int m = br.m0 + g + h * 8;
      const int64_t idx = (br.q_begin + m / a.group) * int64_t(a.hq) + kvh * a.group + m % a.group;
      bf16* dst = a.out + idx * D + tig * 2;
#pragma unroll
      for (int j = 0; j < C::kDT2w; ++j)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int dt = 2 * (C::kDT2w * warp + j) + u;
          const float lo = span_result(acc_o[2 * j + u][2 * h], acc_l[h]);
          const float hi = span_result(acc_o[2 * j + u][2 * h + 1], acc_l[h]);
          *reinterpret_cast<uint32_t*>(dst + dt * 8) = float2_to_bf16x2(lo, hi);
        }
    }
  };
  if (!has_rows || span * st >= br.t_hi) {  // no rows, or every span past the row's keys
    pdl_wait_trigger(a.early_trigger);
    if constexpr (kFold) {
      if (has_rows) store_fold(RowPos::of(br, a, 0, g));  // no key seen: zeros, as the fold schedule
    }
    return false;
  }
  const int q_begin = br.q_begin, ctx = br.ctx, m0 = br.m0, kv_end = br.kv_end;
  int tile = max(br.t_lo, span * st);
  const int32_t* table = a.block_tables + int64_t(row) * a.max_blocks_per_row;

  TileSlots<D, kBN, kThreads> slots;
  const int64_t slot_stride = int64_t(a.hkv) * D;
  const uint64_t evict_first = l2_evict_first_policy();  // K/V: read once a step
  slots.load(table, a.block_size, a.block_shift, tile * kBN, kv_end);
  auto copy_kv = [&] {
    slots.template copy<true>(k_s, a.k_cache, slot_stride, kvh, evict_first);
    cp_async_commit();
    slots.template copy<true>(v_s, a.v_cache, slot_stride, kvh, evict_first);
    cp_async_commit();
  };
  const bool old_keys = (tile + 1) * kBN <= br.pos0;
  if (old_keys) copy_kv();
  // The RoPE op (kRope: its own instantiation, so that the other kernels keep their registers): its
  // table and weights over the exchange region, unused before the first tile.
  const DecodeRope<D> rope_s(smem_raw + C::kMaxOff);
  if constexpr (kRope) fill_decode_rope<D>(a, br, rope_s);
  pdl_wait_trigger(a.early_trigger);
  if constexpr (kRope) {
    __syncthreads();  // the table and weights
    decode_rope<D>(a, br, kvh, first, span, q_s, rope_s);
    __syncthreads();  // Q, and the step's K/V rows in the cache before the copies below read them
  } else {
    for (int i = threadIdx.x; i < kBM * C::kChunks; i += kThreads) {  // Q, as attention_kernel
      const int r = i / C::kChunks, c = i % C::kChunks, m = m0 + r;
      const bool ok = m < br.packed;
      const bf16* src = a.q;
      if (ok) src = a.q + ((q_begin + m / a.group) * int64_t(a.hq) + kvh * a.group + m % a.group) * D + c * 8;
      cp_async16(q_s + r * kStride + c * 8, src, ok);
    }
    cp_async_commit();
  }
  if (!old_keys) copy_kv();

  const RowPos rp = RowPos::of(br, a, 0, g);  // every warp holds the block's 16 rows
  float o[2 * C::kDT2w][4];                   // output dims 16·(kDT2w·warp + j) + ...
#pragma unroll
  for (int i = 0; i < 2 * C::kDT2w; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const bf16* q_frag_base = q_s + (lane % 16) * kStride + (lane / 16) * 8;

  // Q and K of the first tile (requested K, V, Q when the keys are old: V of the tile too).
  if (old_keys) cp_async_wait<0>();
  else cp_async_wait<1>();
  __syncthreads();
  pdl_trace_mark(1);  // (trace builds: Q and the first tile have landed)
#if defined(RILL_PDL_TRACE)
  if constexpr (kToSmem) {
    if (threadIdx.x == 0) g_cluster_trace_times[0] = global_ns();  // (every block's, for the cluster's marks)
  }
#endif
  for (bool first_tile = true;; first_tile = false) {
    const int tile_start = tile * kBN;
    // The tile after this one: the span's next, or the first of the block's next span (-1: none).
    int next_span = span, next = tile + 1;
    if (next >= min(br.t_hi, (span + 1) * st)) {
      next_span = span + step;
      next = next_span * st < br.t_hi ? next_span * st : -1;
    }
    const bool has_next = next >= 0;
    // The next tile's cache slots: the table round trip runs under this tile's wait and Q·Kᵀ (the
    // copies after Q·Kᵀ and P·V use them; this tile's V copy, issued last iteration, is done with
    // the previous ones).
    if (has_next) slots.load(table, a.block_size, a.block_shift, next * kBN, kv_end);
    if (!first_tile) {
      cp_async_wait<1>();  // K of this tile (V may still be in flight)
      __syncthreads();
    }
    // Q·Kᵀ for this warp's 16 keys: n-tiles 2·warp and 2·warp + 1, k steps in order.
    float s[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4], bf[4];
      ldmatrix_x4(af, q_frag_base + kk * 16);
      ldmatrix_x4(bf, k_s + (warp * 16 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
      mma_bf16_16816(s[0], af, bf[0], bf[1]);
      mma_bf16_16816(s[1], af, bf[2], bf[3]);
    }
    __syncthreads();  // every warp is done reading k_s
    if (has_next) {
      slots.template copy<true>(k_s, a.k_cache, slot_stride, kvh, evict_first);
      cp_async_commit();
    }
    scale_and_mask<16>(s, a, rp, tile_start + 16 * warp, ctx, br.full_tile(a, tile_start, kBN), tig);
    // softmax_tile<64>'s operations over the four warps' n-tiles.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (tig == 0) max_s[(warp * 2 + h) * 8 + g] = mx;
    }
    __syncthreads();
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = max_s[h * 8 + g];
#pragma unroll
      for (int w = 1; w < C::kWarps; ++w) mx = fmaxf(mx, max_s[(w * 2 + h) * 8 + g]);
      const float m_new = fmaxf(row_max[h], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[h] = exp2_ftz(row_max[h] - m_use);
      row_max[h] = m_new;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        s[j][2 * h] = exp2_ftz(s[j][2 * h] - m_use);
        s[j][2 * h + 1] = exp2_ftz(s[j][2 * h + 1] - m_use);
        sum_s[((2 * warp + j) * 2 + h) * 32 + lane] = __fadd_rn(s[j][2 * h], s[j][2 * h + 1]);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)  // P of n-tile 2·warp + j as p_fragment packs it
      p_s[(2 * warp + j) * 32 + lane] =
          make_uint2(float2_to_bf16x2(s[j][0], s[j][1]), float2_to_bf16x2(s[j][2], s[j][3]));
#pragma unroll
    for (int i = 0; i < 2 * C::kDT2w; ++i) {  // rescale<D> on this warp's dims
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }
    // V of this tile: the newest outstanding group may be K of the next tile.
    if (has_next) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // (also: the sum terms and P are in shared memory)
    if (warp == 0) {  // the row sum: softmax_tile's pairwise tree over the 8 n-tiles
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tr[C::kNT];
#pragma unroll
        for (int nt = 0; nt < C::kNT; ++nt) tr[nt] = sum_s[(nt * 2 + h) * 32 + lane];
#pragma unroll
        for (int w = C::kNT / 2; w >= 1; w /= 2)
#pragma unroll
          for (int i = 0; i < w; ++i) tr[i] = __fadd_rn(tr[i], tr[i + w]);
        row_sum[h] = __fmaf_rn(row_sum[h], alpha[h], tr[0]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint2 p0 = p_s[(2 * kk) * 32 + lane], p1 = p_s[(2 * kk + 1) * 32 + lane];
      const uint32_t pf[4] = {p0.x, p0.y, p1.x, p1.y};
#pragma unroll
      for (int j = 0; j < C::kDT2w; ++j) {
        const int dt2 = C::kDT2w * warp + j;
        uint32_t vf[4];
        const bf16* vp = v_s + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride + dt2 * 16 + (lane / 16) * 8;
        ldmatrix_x4_trans(vf, vp);
        mma_bf16_16816(o[2 * j], pf, vf[0], vf[1]);
        mma_bf16_16816(o[2 * j + 1], pf, vf[2], vf[3]);
      }
    }
    __syncthreads();  // every warp is done reading v_s, p_s and sum_s
    if (has_next) {
      slots.template copy<true>(v_s, a.v_cache, slot_stride, kvh, evict_first);  // same tile as the K issued above
      cp_async_commit();
    }
    if (next_span == span) {
      tile = next;
      continue;
    }
    // The span's row sum of row h (warp 0's: its lanes' terms, then the quad's sum).
    auto span_sum = [&](int h) {
      float sum = row_sum[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      return sum;
    };
    if constexpr (kFold) {
      // The span ended: fold_span's merge. The row sums go through shared memory to every warp;
      // the row maxima every warp holds.
      float* l_s = reinterpret_cast<float*>(smem_raw + C::kLOff);
      if (warp == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float sum = span_sum(h);
          if (tig == 0) l_s[g + h * 8] = sum;
        }
      }
      __syncthreads();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = l_s[g + h * 8];
        if (row_max[h] != -INFINITY) {
          const SpanMerge w = SpanMerge::make(acc_m[h], acc_l[h], row_max[h], l);
#pragma unroll
          for (int i = 0; i < 2 * C::kDT2w; ++i) {
            acc_o[i][2 * h] = w.apply(acc_o[i][2 * h], o[i][2 * h]);
            acc_o[i][2 * h + 1] = w.apply(acc_o[i][2 * h + 1], o[i][2 * h + 1]);
          }
        }
      }
      if (!has_next) {
        store_fold(rp);
        return true;
      }
    } else {
      // The span ended: its partial (o of this warp's dims; (max, sum) from warp 0); the block's
      // next span starts from scratch. (To shared memory: over K's tile, read by nobody now.)
      float* part_s = reinterpret_cast<float*>(smem_raw + C::kQBytes);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!rp.ok[h]) continue;
        const int m = m0 + g + h * 8;
        const int64_t idx = (q_begin + m / a.group) * int64_t(a.hq) + kvh * a.group + m % a.group;
        const int64_t pidx = int64_t(span) * a.tokens * a.hq + idx;
        float* dst = (kToSmem ? part_s + (g + h * 8) * D : a.part_o + pidx * D) + tig * 2;
#pragma unroll
        for (int j = 0; j < C::kDT2w; ++j)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int dt = 2 * (C::kDT2w * warp + j) + u;
            *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[2 * j + u][2 * h], o[2 * j + u][2 * h + 1]);
          }
      }
      if (warp == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float sum = span_sum(h);
          if (!rp.ok[h] || tig != 0) continue;
          const int m = m0 + g + h * 8;
          const int64_t idx = (q_begin + m / a.group) * int64_t(a.hq) + kvh * a.group + m % a.group;
          float2* ml = kToSmem ? reinterpret_cast<float2*>(part_s + kBM * D) + g + h * 8
                               : reinterpret_cast<float2*>(a.part_ml + (int64_t(span) * a.tokens * a.hq + idx) * 2);
          *ml = make_float2(row_max[h], sum);
        }
      }
      if (!has_next) return true;
    }
#pragma unroll
    for (int i = 0; i < 2 * C::kDT2w; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
    span = next_span;
    tile = next;
  }
}

}  // namespace rill::cuda::attention_detail
