// kernels/cuda/attention_rope.cuh — the RoPE op run inside the invariant decode attention's
// blocks (RILL_ATTENTION_ROPE=1; attention_decode.cuh's decode_split_spans<D, kToSmem, true>): its
// shared-memory layout, the pre-wait table fill and the in-block fold + norm + rotation + K/V store, with
// rope_heads_kernel's arithmetic. Device code, included by attention.cu.
#pragma once

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/partials.cuh"
#include "kernels/cuda/rope_common.cuh"

namespace rill::cuda::attention_detail {

// The RoPE op inside a decode block (AttnKernelArgs::rope_fused; q, k and v still the q/k/v GEMM's
// split-K partials): instead of a kernel of its own between the projection and the attention — one
// more hand-off and dependent round trip on a decode step's critical path (run P: 3.7 µs a layer at
// 512 keys, 8.1 at 8192) — each block folds, normalizes and rotates its own q rows into q_s, and the
// row's new tokens whose keys lie in the block's spans (it reads them; no other block of the row and
// m-tile does) into the cache. The arithmetic is rope_heads_kernel's on the same values
// (partials.cuh's fold, rope_common.cuh's norm and rotation), so the bits are those of the two
// kernels. The tensors receive what the RoPE kernel writes there: q rotated (by the block holding the
// rows' last key), k rotated and v (by the blocks storing them; m-tiles sharing a token write the
// same bytes). Two phases: the folds, spread evenly over the block's threads (a batch-1 block's 4 q
// heads, k and v: 24 KB of partials at 8 ranges, 3 pairs of outputs a thread, every load requested
// before any addition: one round trip), into shared memory as bf16 — q rows into q_s, k and v into
// the staging rows — then the norm and rotation a 16-byte chunk a lane, as the heads kernel.
// Opt-in (RILL_ATTENTION_ROPE=1), because it measured slower: batch-1 decode 211.5 / 191.9 tok/s at
// 512 / 8192 keys against 214.8 / 195.8, on another machine 211.0 / 192.0 against 223.2 / 202.4
// (bench/RESULTS.md run Q). Its trace shows why: the RoPE kernel's span (3.7 µs) goes, but the
// attention takes 3.3 µs longer and the q/k/v and o GEMMs 1.5 µs each — with no small kernel between
// the q/k/v GEMM and the attention, the attention's blocks are placed only as that GEMM's CTAs leave
// (its shared memory is full) and their K/V requests land in its tail; the small kernel was where
// that placement and those requests hid.
// Shared memory (DecodeRope, over the exchange region, free until the first tile): the rotation
// table (cos, sin as bf16 pairs [token of the row][pair]) and the norm weights, filled before the
// wait (fill_decode_rope), and the staged k / v rows.
template <int D>
struct DecodeRope {
  static constexpr int kHalf = D / 2;
  static constexpr size_t kRotBytes = size_t(kMaxRopeTokens) * kHalf * sizeof(__nv_bfloat162);
  static constexpr size_t kWeightBytes = 2 * size_t(D) * sizeof(float);  // q_norm, k_norm as f32
  static constexpr size_t kKvBytes = size_t(kMaxRopeTokens) * 2 * D * sizeof(bf16);
  static constexpr size_t kBytes = kRotBytes + kWeightBytes + kKvBytes;
  static constexpr int kFoldPairs = 3;  // output pairs a thread folds a round (batch 1: one round)
  static_assert(kBytes <= DecodeSplitCfg<D>::kSmemBytes - DecodeSplitCfg<D>::kMaxOff, "over the exchange region");
  __nv_bfloat162* rot;
  float* weights;
  bf16* kv;  // [token][k, v][D]
  __device__ __forceinline__ explicit DecodeRope(unsigned char* base)
      : rot(reinterpret_cast<__nv_bfloat162*>(base)),
        weights(reinterpret_cast<float*>(base + kRotBytes)),
        kv(reinterpret_cast<bf16*>(base + kRotBytes + kWeightBytes)) {}
};

template <int D>
__device__ __forceinline__ void fill_decode_rope(const AttnKernelArgs& a, const BlockRows& br, DecodeRope<D> sm) {
  constexpr int kHalf = D / 2;
  const RopeArgs& r = a.rope;
  const int n = min(br.q_len, kMaxRopeTokens);
  for (int idx = int(threadIdx.x); idx < n * kHalf; idx += int(blockDim.x)) {
    float c, s;
    rope_detail::rotation_at(r, float(r.positions[br.q_begin + idx / kHalf]), idx % kHalf, c, s);
    sm.rot[idx] = __floats2bfloat162_rn(c, s);  // exact: both are bf16 values
  }
  if (r.q_norm)
    for (int i = int(threadIdx.x); i < 2 * D; i += int(blockDim.x)) {
      const void* w = i < D ? r.q_norm : r.k_norm;
      const int c = i % D;  // norm_weights8's conversion
      sm.weights[i] = r.norm_f32 ? static_cast<const float*>(w)[c] : __bfloat162float(static_cast<const bf16*>(w)[c]);
    }
}

template <int D>
__device__ __forceinline__ void decode_rope(const AttnKernelArgs& a, const BlockRows& br, int kvh, int first,
                                            int span0, bf16* q_s, DecodeRope<D> sm) {
  using C = DecodeSplitCfg<D>;
  using namespace rope_detail;
  constexpr int kC = D / 8, kHalf = D / 2, kRowsPass = C::kThreads / kC, kFold = DecodeRope<D>::kFoldPairs;
  const RopeArgs& r = a.rope;
  const int span_keys = a.span_tiles * C::kBN;
  auto walked = [&](int pos) {  // whether this block computes the span holding key `pos`
    const int sp = pos / span_keys;
    return sp >= span0 && (sp - first) % a.span_step == 0;
  };
  // The row's new tokens this block stores: i_lo .. i_lo + n_own - 1 (≤ kMaxRopeTokens tokens span at
  // most two spans, so the walked ones are a run).
  int i_lo = 0, n_own = 0;
  for (int i = 0; i < min(br.q_len, kMaxRopeTokens); ++i) {
    const int pos = br.pos0 + i;
    if (pos < br.kv_end && walked(pos)) {
      if (n_own == 0) i_lo = i;
      ++n_own;
    }
  }
  const int nq = min(C::kBM, br.packed - br.m0);  // the block's q rows
  // Phase 1: the folds. Pair e of the block: q rows' pairs, then the stored tokens' k, then their v.
  const int q_pairs = nq * kHalf, pairs = q_pairs + 2 * n_own * kHalf;
  for (int e0 = 0; e0 < pairs; e0 += kFold * C::kThreads) {
    __nv_bfloat162 out[kFold];
    bf16* dst[kFold];
#pragma unroll
    for (int f = 0; f < kFold; ++f) {
      const int e = e0 + f * C::kThreads + int(threadIdx.x);
      dst[f] = nullptr;
      if (e >= pairs) continue;
      const int d = (e % kHalf) * 2;
      if (e < q_pairs) {
        const int rr = e / kHalf, m = br.m0 + rr;
        out[f] = folded2(r.q_partials, br.q_begin + m / a.group, int64_t(kvh * a.group + m % a.group) * D + d);
        dst[f] = q_s + rr * C::kStride + d;
      } else {
        const int u = (e - q_pairs) / kHalf, is_v = u >= n_own, tok = is_v ? u - n_own : u;
        out[f] = folded2(is_v ? r.v_partials : r.k_partials, br.q_begin + i_lo + tok, int64_t(kvh) * D + d);
        dst[f] = sm.kv + (tok * 2 + is_v) * D + d;
      }
    }
#pragma unroll
    for (int f = 0; f < kFold; ++f)
      if (dst[f]) *reinterpret_cast<__nv_bfloat162*>(dst[f]) = out[f];
  }
  __syncthreads();
  // Phase 2: a 16-byte chunk a lane (the heads kernel's layout), heads in passes of kRowsPass.
  const int c = int(threadIdx.x) % kC, slot = int(threadIdx.x) / kC, j0 = (c % (kC / 2)) * 8;
  const unsigned group = head_lanes<kC>();
  const bool norm = r.q_norm != nullptr;
  auto chunk = [&](int which, int token, uint4& raw) {  // which 0: q, 1: k
    float nw[8], cs[8], sn[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float2 rot = __bfloat1622float2(sm.rot[token * kHalf + j0 + e]);
      cs[e] = rot.x, sn[e] = rot.y;
      nw[e] = norm ? sm.weights[which * D + c * 8 + e] : 0.f;
    }
    norm_rotate_chunk<kC>(r, norm, raw, nw, cs, sn, c, group);
  };
  const bool writes_q = walked(br.kv_end - 1);  // one block a (row, kv head, m-tile)
  const int64_t kv_row = int64_t(r.hkv) * D, kv_off = int64_t(kvh) * D + c * 8;
  for (int h = slot; h < nq + n_own; h += kRowsPass) {  // whole heads: a head's lanes agree
    if (h < nq) {
      const int m = br.m0 + h;
      uint4* at = reinterpret_cast<uint4*>(q_s + h * C::kStride + c * 8);
      uint4 raw = *at;
      chunk(0, m / a.group, raw);
      *at = raw;
      if (writes_q) {
        const int64_t tq = br.q_begin + m / a.group, head = kvh * a.group + m % a.group;
        *reinterpret_cast<uint4*>(static_cast<bf16*>(r.q) + (tq * r.hq + head) * D + c * 8) = raw;
      }
    } else {
      const int u = h - nq, i = i_lo + u;
      const int64_t t = br.q_begin + i;
      uint4 raw = *reinterpret_cast<const uint4*>(sm.kv + (u * 2) * D + c * 8);
      const uint4 vraw = *reinterpret_cast<const uint4*>(sm.kv + (u * 2 + 1) * D + c * 8);
      chunk(1, i, raw);
      *reinterpret_cast<uint4*>(static_cast<bf16*>(r.k) + t * kv_row + kv_off) = raw;
      *reinterpret_cast<uint4*>(const_cast<bf16*>(static_cast<const bf16*>(r.v)) + t * kv_row + kv_off) = vraw;
      const int32_t slot_id = r.slot_mapping[t];
      if (slot_id >= 0 && slot_id < r.num_slots) {
        *reinterpret_cast<uint4*>(static_cast<bf16*>(r.k_cache) + slot_id * kv_row + kv_off) = raw;
        *reinterpret_cast<uint4*>(static_cast<bf16*>(r.v_cache) + slot_id * kv_row + kv_off) = vraw;
      }
    }
  }
  // Rows past nq stay as zero Q rows (the unfused path's zero-filled copies).
  for (int i = int(threadIdx.x); i < (C::kBM - nq) * C::kChunks; i += C::kThreads) {
    bf16* at = q_s + (nq + i / C::kChunks) * C::kStride + (i % C::kChunks) * 8;
    *reinterpret_cast<uint4*>(at) = make_uint4(0u, 0u, 0u, 0u);
  }
}

}  // namespace rill::cuda::attention_detail
