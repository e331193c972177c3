// kernels/cuda/attention.cu — paged attention on tensor cores (mma.sync bf16, f32 accumulation,
// online softmax), one kernel for prefill and decode. A block owns one (row, kv head, m-tile,
// KV split): its M rows are the row's (query token, head-in-group) pairs packed token-major, so
// the G = hq / hkv query heads of a KV head share every K/V tile (GQA costs no extra reads).
// K/V tiles are gathered through the block table with cp.async (zero-filled past the end) and
// overlapped with compute (K of the next tile loads during P·V, V during the next Q·Kᵀ).
// Decode (few query tokens, long context) splits the KV range over blocks (flash-decoding);
// each split writes an unnormalised partial (O, max, sum) that attention_combine merges.
// Scores: s = q·k·scale, optionally softcap·tanh(s / softcap), then causal / window masking;
// the softmax runs in base 2 on s·log2(e).
//
// Batch-invariant mode (AttentionArgs::invariant). Keys per tile are fixed per head_dim (64, or
// 32 at head_dim 256) and tiles start at absolute KV positions; the KV range is cut into spans of
// kSpanKeys absolute positions. Each span's partial (O, max, sum) starts from scratch, and the
// spans a query sees are merged by one left fold in span order (SpanMerge: the same float ops
// wherever it runs). Fully masked tiles and spans are exact no-ops. So a query's arithmetic
// depends only on its own position, its row's K/V and the head_dim — not on the other rows, the
// batch's lengths, the m-tile it shares, nor on how its prompt was chunked. Two schedules compute
// the same bits: "split" — one block per (row, kv head, m-tile, span), partials in the
// workspace, attention_combine_spans folds them (decode-sized batches); "fold" — one block per
// (row, kv head, m-tile) walks every span and folds in registers (prefill, or when the partials
// do not fit the workspace). At head_dim 128 with 128-row blocks the fold schedule runs on
// warpgroup MMA where the build has sm_90a code (attention_wgmma.cu, same bits); the split
// schedule with one m-tile (decode) at head_dim 64 / 128 runs a span on four warps
// (attention_decode.cu, with the span combine; same bits). The per-tile
// arithmetic every kernel shares (masking, softmax, span merge) is in attention_common.cuh.
// CUDA graphs: in invariant mode the launch grids are a function of (num_rows, heads,
// max_blocks_per_row, block_size, max_seqlen_q, tokens) only — never of max_context_len or of
// the context lengths, which the kernels read from device memory; blocks whose span lies past
// their row's keys exit at once. A graph captured for a batch bucket therefore replays
// correctly for any context lengths that fit the block-table width.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/attention_rope.cuh"

namespace rill::cuda {
namespace {

using namespace attention_detail;

bool g_attention_wgmma = false;  // set_attention_wgmma (the backend turns it on where supported)
bool g_attention_rope = false;  // set_attention_rope (RILL_ATTENTION_ROPE)
std::atomic<uint64_t> g_attention_rope_launches{0};  // (several devices may launch at once)

template <int D, int kWarps, int kBN, bool kFold>
__global__ void __launch_bounds__(32 * kWarps) attention_kernel(AttnKernelArgs a) {
  pdl_wait();
  pdl_trigger();
  using Cfg = AttnConfig<D, kWarps, kBN>;
  constexpr int kBM = Cfg::kBM, kStride = Cfg::kStride, kThreads = Cfg::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* k_s = q_s + kBM * kStride;
  bf16* v_s = k_s + kBN * kStride;

  const int row = blockIdx.z / a.splits, split = blockIdx.z % a.splits;
  const int kvh = blockIdx.y;
  BlockRows br;
  if (!br.init(a, row, kBM, kBN)) return;
  const int q_begin = br.q_begin, ctx = br.ctx, packed = br.packed, m0 = br.m0;
  const int kv_end = br.kv_end, t_lo = br.t_lo, t_hi = br.t_hi;
  int my_lo, my_hi;
  if (kFold) {
    my_lo = t_lo;
    my_hi = t_hi;
  } else if (a.span_tiles > 0) {
    my_lo = max(t_lo, split * a.span_tiles);
    my_hi = min(t_hi, (split + 1) * a.span_tiles);
    if (my_lo >= my_hi) return;  // span past (or before) this m-tile's keys: nobody reads it
  } else {
    const int n_tiles_all = max(t_hi - t_lo, 0);
    const int chunk = (n_tiles_all + a.splits - 1) / a.splits;
    my_lo = t_lo + split * chunk;
    my_hi = min(t_hi, my_lo + chunk);
  }
  const int n_tiles = max(my_hi - my_lo, 0);
  const int32_t* table = a.block_tables + int64_t(row) * a.max_blocks_per_row;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;

  // Q tile: packed row m → token q_begin + m / group, head kvh * group + m % group.
  for (int i = threadIdx.x; i < kBM * Cfg::kChunks; i += kThreads) {
    int r = i / Cfg::kChunks, c = i % Cfg::kChunks;
    int m = m0 + r;
    bool ok = m < packed;
    const bf16* src = a.q;
    if (ok) {
      int64_t token = q_begin + m / a.group;
      int head = kvh * a.group + m % a.group;
      src = a.q + (token * a.hq + head) * D + c * 8;
    }
    cp_async16(q_s + r * kStride + c * 8, src, ok);
  }
  cp_async_commit();
  TileSlots<D, kBN, kThreads> slots;
  const int64_t slot_stride = int64_t(a.hkv) * D;
  if (n_tiles > 0) {
    slots.load(table, a.block_size, a.block_shift, my_lo * kBN, kv_end);
    slots.copy(k_s, a.k_cache, slot_stride, kvh);
    cp_async_commit();
    slots.copy(v_s, a.v_cache, slot_stride, kvh);
    cp_async_commit();
  }

  // This thread's two rows (g and g + 8 of the warp's 16) and their query positions.
  const RowPos rp = RowPos::of(br, a, warp, g);
  const bool warp_active = m0 + warp * 16 < packed;

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  // Fold schedule: the merged spans so far.
  float acc_o[kFold ? D / 8 : 1][4];
  float acc_m[2] = {-INFINITY, -INFINITY}, acc_l[2] = {0.f, 0.f};
  if constexpr (kFold) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.f;
  }
  uint32_t qf[Cfg::kQInRegs ? D / 16 : 1][4];

  if (n_tiles > 0) {
    cp_async_wait<1>();  // Q and K of the first tile
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
  // A fragment (16x16): lanes 0-15 address rows 0-15 at column k0, lanes 16-31 at k0 + 8.
  const bf16* q_frag_base = q_s + (warp * 16 + (lane % 16)) * kStride + (lane / 16) * 8;
  if constexpr (Cfg::kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], q_frag_base + kk * 16);
  }

  for (int t = 0; t < n_tiles; ++t) {
    const int tile_start = (my_lo + t) * kBN;
    if (t > 0) {
      cp_async_wait<1>();  // K of this tile (V may still be in flight)
      __syncthreads();
    }
    float s[kBN / 8][4];
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    if (warp_active) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t af[4];
        if constexpr (Cfg::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) af[i] = qf[kk][i];
        } else {
          ldmatrix_x4(af, q_frag_base + kk * 16);
        }
#pragma unroll
        for (int nt2 = 0; nt2 < kBN / 16; ++nt2) {
          // B fragments of two 8-key n-tiles: K stored [key][dim] is the column-major B.
          uint32_t bf[4];
          const bf16* p = k_s + (nt2 * 16 + (lane % 8) + (lane / 16) * 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8;
          ldmatrix_x4(bf, p);
          mma_bf16_16816(s[2 * nt2], af, bf[0], bf[1]);
          mma_bf16_16816(s[2 * nt2 + 1], af, bf[2], bf[3]);
        }
      }
    }
    __syncthreads();  // every warp is done reading k_s
    if (t + 1 < n_tiles) {
      slots.load(table, a.block_size, a.block_shift, tile_start + kBN, kv_end);
      slots.copy(k_s, a.k_cache, slot_stride, kvh);
      cp_async_commit();
    }

    if (warp_active) {
      scale_and_mask<kBN>(s, a, rp, tile_start, ctx, br.full_tile(a, tile_start, kBN), tig);
      float alpha[2];
      softmax_tile<kBN>(s, row_max, row_sum, alpha);
      rescale<D>(o, alpha);
    }

    // V of this tile: the newest outstanding group may be K of the next tile.
    if (t + 1 < n_tiles) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (warp_active) {
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        uint32_t pf[4];
        p_fragment<kBN>(pf, s, kk);
#pragma unroll
        for (int dt2 = 0; dt2 < D / 16; ++dt2) {
          // V stored [key][dim] is row-major B: load transposed.
          uint32_t vf[4];
          const bf16* p = v_s + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride + dt2 * 16 + (lane / 16) * 8;
          ldmatrix_x4_trans(vf, p);
          mma_bf16_16816(o[2 * dt2], pf, vf[0], vf[1]);
          mma_bf16_16816(o[2 * dt2 + 1], pf, vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // every warp is done reading v_s
    if (t + 1 < n_tiles) {
      slots.copy(v_s, a.v_cache, slot_stride, kvh);  // same tile as the K issued above
      cp_async_commit();
    }
    if constexpr (kFold) {
      if (warp_active && ((my_lo + t + 1) % a.span_tiles == 0 || t + 1 == n_tiles))
        fold_span<D>(acc_o, acc_m, acc_l, o, row_max, row_sum);  // a span ended: merge it and restart
    }
  }

  if (!warp_active) return;
  if constexpr (kFold) {
    store_folded<D>(a, acc_o, acc_l, rp, m0 + warp * 16 + g, q_begin, kvh, tig);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!rp.ok[h]) continue;
      int m = m0 + warp * 16 + g + h * 8;
      int64_t token = q_begin + m / a.group;
      int head = kvh * a.group + m % a.group;
      int64_t idx = token * a.hq + head;
      if (a.splits == 1) {
        float inv = row_sum[h] > 0.f ? 1.f / row_sum[h] : 0.f;
        bf16* dst = a.out + idx * D + tig * 2;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<uint32_t*>(dst + dt * 8) = float2_to_bf16x2(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
      } else {
        int64_t pidx = int64_t(split) * a.tokens * a.hq + idx;
        float* dst = a.part_o + pidx * D + tig * 2;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
        if (tig == 0) *reinterpret_cast<float2*>(a.part_ml + pidx * 2) = make_float2(row_max[h], row_sum[h]);
      }
    }
  }
}


// Merges the splits' partials of one (token, head): weights 2^(m_s - M), skipping empty splits.
template <int D>
__global__ void attention_combine_kernel(const float* part_o, const float* part_ml, bf16* out, int64_t tokens,
                                         int hq, int splits) {
  pdl_wait();
  pdl_trigger();
  int64_t idx = blockIdx.x;  // token * hq + head
  int64_t stride = tokens * hq;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, part_ml[(s * stride + idx) * 2]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f, sum = 0.f;
    for (int s = 0; s < splits; ++s) {
      float2 ml = *reinterpret_cast<const float2*>(part_ml + (s * stride + idx) * 2);
      if (ml.x == -INFINITY || ml.y == 0.f) continue;
      float w = exp2f(ml.x - mx);
      sum += ml.y * w;
      acc += part_o[(s * stride + idx) * D + d] * w;
    }
    out[idx * D + d] = __float2bfloat16_rn(sum > 0.f ? acc / sum : 0.f);
  }
}

// Resident blocks per SM of one kernel configuration (queried once).
template <int D, int kWarps, int kBN, bool kFold = false>
int blocks_per_sm() {
  using Cfg = AttnConfig<D, kWarps, kBN>;
  static int cached = [] {
    RILL_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<D, kWarps, kBN, kFold>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::kSmemBytes)));
    int n = 0;
    RILL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attention_kernel<D, kWarps, kBN, kFold>,
                                                                Cfg::kThreads, Cfg::kSmemBytes));
    return n > 0 ? n : 1;
  }();
  return cached;
}

// KV splits: fill one wave of resident blocks without spilling into a second, partial one
// (measured on an H200: a 1.2-wave grid ran 25% slower than a 0.8-wave one; 32 rows × 8192
// keys then runs at 88% of the copy bandwidth).
int choose_splits(const AttentionArgs& a, int64_t blocks, int64_t kv_tiles, int resident_per_sm) {
  if (a.force_splits > 0) return a.force_splits;
  int64_t wave = int64_t(a.num_sms) * resident_per_sm;
  int64_t splits = blocks >= wave ? 1 : wave / blocks;
  // At least 4 tiles per split: with fewer, the combine pass and per-block setup dominate
  // (batch 1, 8192 keys: 64 splits 39 us, 128 splits 48 us).
  splits = std::max<int64_t>(1, std::min<int64_t>({splits, std::max<int64_t>(1, kv_tiles / 4), 128}));
  return int(splits);
}

AttnKernelArgs kernel_args(const AttentionArgs& a) {
  AttnKernelArgs k{};
  k.q = static_cast<const bf16*>(a.q);
  k.k_cache = static_cast<const bf16*>(a.k_cache);
  k.v_cache = static_cast<const bf16*>(a.v_cache);
  k.out = static_cast<bf16*>(a.out);
  k.cu_seqlens_q = a.cu_seqlens_q;
  k.context_lens = a.context_lens;
  k.block_tables = a.block_tables;
  k.tokens = a.tokens;
  k.hq = a.hq;
  k.hkv = a.hkv;
  k.group = a.hq / a.hkv;
  k.block_size = a.block_size;
  k.block_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((1 << sh) == a.block_size) k.block_shift = sh;
  k.max_blocks_per_row = a.max_blocks_per_row;
  k.scale = a.scale;
  k.softcap = a.softcap;
  k.window = a.sliding_window;
  k.early_trigger = pdl_attention_early_trigger();
  return k;
}

template <int D, int kWarps, int kBN>
void run_attention(const AttentionArgs& a, cudaStream_t stream) {
  using Cfg = AttnConfig<D, kWarps, kBN>;
  const int group = a.hq / a.hkv;
  const int64_t m_tiles_all = (int64_t(a.max_seqlen_q) * group + Cfg::kBM - 1) / Cfg::kBM;
  const int64_t kv_tiles = (int64_t(a.max_context_len) + kBN - 1) / kBN;
  int splits = choose_splits(a, m_tiles_all * a.hkv * a.num_rows, kv_tiles, blocks_per_sm<D, kWarps, kBN>());
  const int64_t bytes_per_split = a.tokens * a.hq * int64_t(D + 2) * int64_t(sizeof(float));
  if (!a.workspace) splits = 1;
  else splits = int(std::max<int64_t>(1, std::min<int64_t>(splits, int64_t(a.workspace_bytes) / bytes_per_split)));
  AttnKernelArgs k = kernel_args(a);
  k.splits = splits;
  k.span_tiles = 0;
  int64_t parts = int64_t(splits) * a.tokens * a.hq;
  k.part_o = a.workspace;
  k.part_ml = a.workspace ? a.workspace + parts * D : nullptr;
  unsigned m_tiles = ceil_div(int64_t(a.max_seqlen_q) * k.group, Cfg::kBM);
  dim3 grid(m_tiles, unsigned(a.hkv), unsigned(a.num_rows) * unsigned(splits));
  launch_pdl(attention_kernel<D, kWarps, kBN, false>, dim3(grid), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, k);
  RILL_CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    launch_pdl(attention_combine_kernel<D>, dim3(unsigned(a.tokens * a.hq)), dim3(D < 128 ? D : 128), 0, stream,
        k.part_o, k.part_ml, k.out, a.tokens, a.hq, splits);
    RILL_CUDA_CHECK_LAUNCH();
  }
}

// Invariant mode: spans at fixed absolute positions; the split schedule when the blocks without
// splitting leave the GPU under one wave and every span's partials fit the workspace (sized by
// num_rows * max_seqlen_q ≥ tokens, so the choice is graph-stable), else the fold schedule.
template <int D, int kWarps, int kBN>
void run_attention_invariant(const AttentionArgs& a, cudaStream_t stream) {
  using Cfg = AttnConfig<D, kWarps, kBN>;
  static_assert(kSpanKeys % kBN == 0, "a span is whole tiles");
  // Default span: one 64-key tile at head_dim ≤ 128 (a decode step spreads over many blocks:
  // 158 vs 138 tok/s batch-1 on the 8B shape), 256 keys at head_dim 256, where a span merge costs
  // twice as much a tile and long prefill chunks over a cached context (fold schedule) would pay
  // it every two 32-key tiles (Qwen3.5-9B cached turn 50k + 200: 94 ms with 256, 184 ms with 64).
  const int span_keys = a.span_keys > 0 ? a.span_keys : D > 128 ? 4 * kSpanKeys : kSpanKeys;
  if (span_keys % kSpanKeys != 0) throw_error("[attention] span_keys must be a multiple of 64");
  AttnKernelArgs k = kernel_args(a);
  k.span_tiles = span_keys / kBN;
  const unsigned m_tiles = ceil_div(int64_t(a.max_seqlen_q) * k.group, Cfg::kBM);
  const int64_t max_keys = int64_t(a.max_blocks_per_row) * a.block_size;
  const int64_t spans = std::max<int64_t>(1, (max_keys + span_keys - 1) / span_keys);
  const int64_t blocks = int64_t(m_tiles) * a.hkv * a.num_rows;
  const int64_t bytes_per_span = int64_t(a.num_rows) * a.max_seqlen_q * a.hq * int64_t(D + 2) * int64_t(sizeof(float));
  const bool fits = a.workspace && spans > 1 && a.max_seqlen_q <= 65535 &&
                    a.tokens <= int64_t(a.num_rows) * a.max_seqlen_q &&
                    spans * bytes_per_span <= int64_t(a.workspace_bytes);
  const bool split = fits && (a.force_splits > 1 ||
                              (a.force_splits == 0 && blocks < int64_t(a.num_sms) * blocks_per_sm<D, kWarps, kBN>()));
  // The RoPE op of q (AttentionArgs::rope): inside the decode split / cluster kernels' blocks where
  // they run and can (the q/k/v GEMM's partials not yet folded), else its own kernel first.
  constexpr bool kDecodeKernels = kWarps == 1 && kBN == 64 && (D == 64 || D == 128);
  if (a.rope) {
    const RopeArgs& r = *a.rope;
    if (kDecodeKernels && split && a.max_seqlen_q <= kMaxRopeTokens && g_attention_rope && r.tokens == a.tokens &&
        r.hq == a.hq && r.hkv == a.hkv && r.q == a.q && r.q_partials.ws && r.k_partials.ws && r.v_partials.ws &&
        rope_fits_decode_attention(r, D)) {
      k.rope_fused = true;
      k.rope = r;
      g_attention_rope_launches.fetch_add(1, std::memory_order_relaxed);
    } else {
      launch_rope(r, stream);
    }
  }
  if (split) {
    k.splits = int(spans);
    k.part_o = a.workspace;
    k.part_ml = a.workspace + spans * a.tokens * a.hq * D;
    dim3 grid(m_tiles, unsigned(a.hkv), unsigned(a.num_rows) * unsigned(spans));
    if constexpr (kDecodeKernels) {  // one m-tile: four warps a span (attention_decode.cu)
      launch_decode_split<D>(k, a, grid, spans, span_keys, stream);
      return;
    }
    launch_pdl(attention_kernel<D, kWarps, kBN, false>, dim3(grid), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, k);
    RILL_CUDA_CHECK_LAUNCH();
    launch_combine_spans<D>(k, a, spans, span_keys, stream);
  } else {
    k.splits = 1;
    if constexpr (kDecodeKernels) {
      if (m_tiles == 1 && attention_decode_fold() >= 1) {
        launch_decode_fold<D>(k, a, stream);
        return;
      }
    }
    if constexpr (D == 128 && kWarps == 8) {
      if (g_attention_wgmma && attention_wgmma_fits(k, a.num_slots)) {  // the same bits on warpgroup MMA
        launch_attention_wgmma(k, m_tiles, a.hkv, a.num_rows, a.num_slots, stream);
        return;
      }
    }
    blocks_per_sm<D, kWarps, kBN, true>();  // sets the shared-memory attribute once
    dim3 grid(m_tiles, unsigned(a.hkv), unsigned(a.num_rows));
    launch_pdl(attention_kernel<D, kWarps, kBN, true>, dim3(grid), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, k);
    RILL_CUDA_CHECK_LAUNCH();
  }
}

// A variant exists when a K/V tile's 16-byte chunks divide evenly over its threads.
constexpr bool variant_fits(int d, int warps, int bn) {
  return (bn * (d / 8)) % (32 * warps) == 0 && (32 * warps) % (d / 8) == 0;
}

template <int D, int kWarps, int kBN>
bool try_variant(const AttentionArgs& a, int warps, int bn, cudaStream_t stream) {
  if constexpr (variant_fits(D, kWarps, kBN)) {
    if (warps == kWarps && bn == kBN) {
      run_attention<D, kWarps, kBN>(a, stream);
      return true;
    }
  }
  return false;
}

// Instantiated variants: (warps, keys per tile). 32-key tiles halve the shared memory of the
// one- and two-warp decode blocks, so twice as many fit on an SM (decode is latency-bound).
template <int D>
void dispatch_variant(const AttentionArgs& a, int warps, int bn, cudaStream_t stream) {
  bool done = false;
  if constexpr (D <= 128) {
    done = try_variant<D, 1, 64>(a, warps, bn, stream) || try_variant<D, 2, 64>(a, warps, bn, stream) ||
           try_variant<D, 4, 64>(a, warps, bn, stream) || try_variant<D, 8, 64>(a, warps, bn, stream) ||
           try_variant<D, 1, 32>(a, warps, bn, stream) || try_variant<D, 2, 32>(a, warps, bn, stream);
  } else {
    done = try_variant<D, 1, 32>(a, warps, bn, stream) || try_variant<D, 2, 32>(a, warps, bn, stream) ||
           try_variant<D, 4, 32>(a, warps, bn, stream) || try_variant<D, 8, 32>(a, warps, bn, stream);
  }
  if (!done) throw_error("[attention] no kernel variant for this (warps, keys per tile, head_dim)");
}

// Invariant mode: keys per tile fixed by head_dim; warps (rows of the m-tile) are free.
template <int D>
void dispatch_invariant(const AttentionArgs& a, int warps, cudaStream_t stream) {
  constexpr int kBN = D > 128 ? 32 : 64;
  switch (warps) {
    case 1: run_attention_invariant<D, 1, kBN>(a, stream); return;
    case 2: run_attention_invariant<D, 2, kBN>(a, stream); return;
    case 4: run_attention_invariant<D, 4, kBN>(a, stream); return;
    case 8:  // head_dim 16: a K/V tile has too few 16-byte chunks for 8 warps; 4 do the same rows' math
      if constexpr (variant_fits(D, 8, kBN)) run_attention_invariant<D, 8, kBN>(a, stream);
      else run_attention_invariant<D, 4, kBN>(a, stream);
      return;
    default: throw_error("[attention] batch-invariant attention runs 1, 2, 4 or 8 warps per block");
  }
}

}  // namespace

bool attention_wgmma_supported() { return attention_wgmma_available(); }
uint64_t attention_wgmma_launches() { return attention_detail::attention_wgmma_launches(); }
void set_attention_wgmma(bool on) { g_attention_wgmma = on && attention_wgmma_available(); }
bool attention_wgmma_enabled() { return g_attention_wgmma; }
void set_attention_rope(bool on) { g_attention_rope = on; }
bool attention_rope_enabled() { return g_attention_rope; }
uint64_t attention_rope_launches() { return g_attention_rope_launches.load(); }

void launch_attention(const AttentionArgs& args, cudaStream_t stream) {
  attention_detail::clear_ended_with_combine();
  if (args.tokens == 0 || args.num_rows == 0 || (args.rope && !args.invariant)) {
    if (args.rope) launch_rope(*args.rope, stream);  // (the invariant path runs it or launches it itself)
    if (args.tokens == 0 || args.num_rows == 0) return;
  }
  AttentionArgs a = args;
  if (!a.invariant) a.rope = nullptr;
  const int64_t packed = int64_t(a.max_seqlen_q) * (a.hq / a.hkv);
  const int warps = a.force_warps > 0 ? a.force_warps : packed <= 16 ? 1 : packed <= 32 ? 2 : 4;
  if (a.invariant) {
    // Prefill (more than 64 packed query rows): 8 warps, 128 rows sharing each K/V tile (half the
    // tile loads per row of 4 warps; rows are independent, so the bits do not change).
    const int inv_warps = a.force_warps > 0 ? a.force_warps : packed > 64 ? 8 : warps;
    switch (a.head_dim) {
      case 16: dispatch_invariant<16>(a, inv_warps, stream); return;
      case 32: dispatch_invariant<32>(a, inv_warps, stream); return;
      case 64: dispatch_invariant<64>(a, inv_warps, stream); return;
      case 128: dispatch_invariant<128>(a, inv_warps, stream); return;
      case 256: dispatch_invariant<256>(a, inv_warps, stream); return;
      default: throw_error("[attention] head_dim must be 16, 32, 64, 128 or 256");
    }
  }
  int bn = a.force_bn > 0 ? a.force_bn : (a.head_dim > 128 || warps <= 2) ? 32 : 64;
  // head_dim 16 with 8 warps has too few chunks per tile for 32 keys: use 64.
  if (a.force_bn == 0 && !variant_fits(a.head_dim, warps, bn)) bn = 64;
  switch (a.head_dim) {
    case 16: dispatch_variant<16>(a, warps, bn, stream); return;
    case 32: dispatch_variant<32>(a, warps, bn, stream); return;
    case 64: dispatch_variant<64>(a, warps, bn, stream); return;
    case 128: dispatch_variant<128>(a, warps, bn, stream); return;
    case 256: dispatch_variant<256>(a, warps, bn, stream); return;
    default: throw_error("[attention] head_dim must be 16, 32, 64, 128 or 256");
  }
}

}  // namespace rill::cuda
