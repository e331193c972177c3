// kernels/cuda/attention_wgmma.cu — the batch-invariant attention's fold schedule (prefill) at
// head_dim 128 on Hopper warpgroup MMA (sm_90a): the same bits as attention.cu's mma.sync kernels,
// whose fold schedule ran at ~120 TFLOP/s on the H200 (255 registers, two warps a scheduler).
//
// A block owns 128 packed query rows of one (row, kv head) — two warpgroups of 64 — and walks the
// row's K/V tiles of 64 keys. Per tile and warpgroup: S = Q·Kᵀ as 8 wgmma m64n64k16 steps (Q and K
// from shared memory), the scalar masking / online softmax / span merge of attention_common.cuh on
// S's registers (laid out as mma.sync's C fragments), then O += P·V as 4 wgmma m64n128k16 steps
// with P from registers (mma.sync's A fragments) and V read transposed from shared memory. Each
// wgmma k16 step rounds as one mma.sync m16n8k16 step (the GEMM relies on the same fact), and the
// steps run in the mma.sync kernel's order, so spans, their merges and the output are bit for bit
// those of the split schedule — checked on the device (CudaInvariance.WgmmaAttentionEqualsMmaSync
// and the schedule-agreement tests).
//
// K/V tiles arrive by tensor copies (TMA) through the block table, kStages deep: the first warp of a
// producer warpgroup (which hands its registers to the consumers) requests each tile in pages of
// min(block_size, 64) keys (one box per page, K or V and 64-dim half) as soon as every consumer
// warp released its stage, so the consumers issue no copy instructions and never wait on one
// another (a consumer warp requested them before, pacing both warpgroups: 537 → 410 µs a layer at
// 4096 tokens, run K); the cache is a 3-D tensor [slots, kv heads, 128]
// (attention_wgmma_fits: power-of-two blocks of at least 8 slots; the mma.sync kernel, same bits,
// takes any other cache). Per tile the warpgroup issues S_{t+1} = Q·K_{t+1}ᵀ right behind
// O = P_t·V_t, so the span merge of tile t runs while the tensor cores compute the next scores.
// Measured (Nsight Compute, one layer of a 4096-token prompt, bench/RESULTS.md run J): 1,106
// instructions a warp and tile before — ~150 of masking predicated into every tile, ~25 a
// division, ~150 register moves of o, ~200 of per-thread copies — 632 after, 710 → 537 µs; with
// the producer warpgroup 410 µs (336 TFLOP/s, run K).
#include <algorithm>
#include <atomic>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/wgmma.cuh"

namespace rill::cuda::attention_detail {
namespace {

// Two consumer warpgroups of 64 query rows, and a producer warpgroup (warpgroup 0) whose first warp
// requests the K/V tiles.
constexpr int kD = 128, kBN = 64, kWGs = 2, kBM = 64 * kWGs, kThreads = 128 * (kWGs + 1), kStages = 4;
constexpr int kQBytes = kBM * kD * 2;   // two 64-dim blocks of kBM rows × 128 bytes
constexpr int kKVBytes = kBN * kD * 2;  // one K or V tile: two 64-dim blocks of kBN rows
constexpr size_t kSmemBytes = size_t(kQBytes) + size_t(2 * kStages) * kKVBytes + 1024;  // + alignment slack
static_assert(kBN == kSpanKeys, "a span holds whole tiles");

// kCap: with a softcap (1) or without (0); kSpan1: spans of one tile (the default span of 64 keys), where
// o starts from zero right before each tile's P·V and never carries over a tile — kernels that carry
// no code of the other cases. (With o carried through the loop, the compiler moved its 64 registers
// and the totals between register ranges every tile: ~150 moves a tile, measured.)
template <int kCap, bool kSpan1>
__global__ void __launch_bounds__(kThreads, 1)
    attention_wgmma_kernel(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                           AttnKernelArgs a) {
#if defined(RILL_WGMMA_DEVICE)
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The swizzle pattern repeats every 1024 bytes: tiles start on such a boundary.
  unsigned char* q_s = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* k_s = q_s + kQBytes;
  unsigned char* v_s = k_s + kStages * kKVBytes;
  __shared__ uint64_t full[kStages], empty[kStages];

  const int row = blockIdx.z, kvh = blockIdx.y;
  BlockRows br;
  if (!br.init(a, row, kBM, kBN)) return;
  const int q_begin = br.q_begin, ctx = br.ctx, packed = br.packed, m0 = br.m0;
  const int kv_end = br.kv_end, t_lo = br.t_lo, t_hi = br.t_hi;
  const int n_tiles = max(t_hi - t_lo, 0);
  const int32_t* table = a.block_tables + int64_t(row) * a.max_blocks_per_row;

  // Read through a shuffle: the compiler then knows the warpgroup index is warp-uniform. wg 0
  // produces; consumer warpgroup wg - 1 owns rows [64 (wg - 1), 64 wg) of the block, its warp
  // `warp` (0-7 over both) rows 16 warp ...
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  const int cwg = wg - 1, warp = int(threadIdx.x / 32) - 4, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  // The second consumer warpgroup has rows only when the block's second 64 do; without, it only
  // helps copy Q.
  const int active_warps = m0 + 64 < packed ? 8 : 4;

  // Q tile: packed row m → token q_begin + m / group, head kvh · group + m % group.
  for (int i = threadIdx.x; i < kBM * (kD / 8); i += kThreads) {
    const int r = i / (kD / 8), c = i % (kD / 8), m = m0 + r;
    const bool ok = m < packed;
    const bf16* src = ok ? a.q + ((int64_t(q_begin) + m / a.group) * a.hq + kvh * a.group + m % a.group) * kD + c * 8
                         : a.q;
    cp_async16(q_s + swizzled_offset(kBM, r, c), src, ok);
  }
  // Stage s holds tiles s, s + kStages, ...: "full" completes on the producer's one arrival and
  // the tile's bytes, "empty" when every active warp is done reading it (one arrival a warp). A
  // warpgroup waits only for the tile it multiplies, so the two warpgroups may drift apart.
  if (threadIdx.x == 0) {
    tma_prefetch_map(&tk);  // (mbarrier.cuh)
    tma_prefetch_map(&tv);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(&full[st], 1);
      mbar_init(&empty[st], unsigned(active_warps));
    }
    mbar_init_fence();
  }
  __syncthreads();
  // K/V tiles arrive by tensor copies issued by the producer warp: a tile is 64 / box_rows pages of box_rows
  // = min(block_size, 64) keys (whole cache blocks, or one part of a block), each page four boxes
  // (K and V, two 64-dim halves) of box_rows × 128 bytes, written with the 128-byte swizzle the
  // descriptors name. Lane p handles page p; its block-table entry is read a tile ahead. Pages at or
  // past kv_end are not requested (their rows are zeroed below). The per-thread copies this
  // replaced cost every thread ~200 instructions a tile (address arithmetic, table reads, arrivals),
  // in a kernel bound by instruction issue.
  const int box_shift = min(a.block_shift, 6), box_rows = 1 << box_shift, pages = kBN >> box_shift;
  int32_t page_slot = -1;  // lane p < pages: the slot of page p of the next tile to request, or -1
  auto load_page = [&](int t) {
    const int kp = (t_lo + t) * kBN + lane * box_rows;
    page_slot = lane < pages && kp < kv_end
                    ? (__ldg(table + (kp >> a.block_shift)) << a.block_shift) | (kp & (a.block_size - 1))
                    : -1;
  };
  auto request = [&](int t) {  // the producer warp: tile t (its pages loaded) into stage t % kStages
    const int st = t % kStages, tile_start = (t_lo + t) * kBN;
    const int issued = min(pages, (kv_end - tile_start + box_rows - 1) >> box_shift);
    // The phase's one arrival, with its byte count; copies landing before it only drive the
    // transaction count below zero for a while (allowed), so the lanes need no sync here.
    if (lane == 0) mbar_arrive_expect_tx(&full[st], unsigned(issued * box_rows * 128 * 4));
    if (page_slot >= 0) {
      unsigned char* kd = k_s + st * kKVBytes + lane * box_rows * 128;
      unsigned char* vd = v_s + st * kKVBytes + lane * box_rows * 128;
      tma_load_3d(kd, &tk, 0, kvh, page_slot, &full[st]);
      tma_load_3d(kd + kBN * 128, &tk, 64, kvh, page_slot, &full[st]);
      tma_load_3d(vd, &tv, 0, kvh, page_slot, &full[st]);
      tma_load_3d(vd + kBN * 128, &tv, 64, kvh, page_slot, &full[st]);
    }
    if (t + 1 < n_tiles) load_page(t + 1);
  };
  const bool producer = threadIdx.x < 32;  // the producer warpgroup's first warp
  if (producer && n_tiles > 0) {
    load_page(0);
    for (int t = 0; t < kStages && t < n_tiles; ++t) request(t);
  }
  cp_async_wait<0>();  // Q landed (this thread's copies) ...
  fence_proxy_async_shared();  // ... is visible to wgmma ...
  __syncthreads();             // ... for every thread's rows
  if (wg == 0) {  // the producer: each later tile into its stage once every active warp released it
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");  // registers to the consumers
    if (producer)
      for (int t = kStages; t < n_tiles; ++t) {
        mbar_wait(&empty[t % kStages], unsigned(t / kStages - 1) & 1u);
        request(t);
      }
    return;  // (the consumers wait for every requested tile: no copy outlives the block)
  }
  // An idle warpgroup leaves: it takes part in no barrier from here on (were it to arrive on
  // "empty", it would complete phases the producer waits for).
  if (warp >= active_warps) return;
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");

  const RowPos rp = RowPos::of(br, a, warp, g);
  float o[kD / 8][4], acc_o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) {
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.f;
  }
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  float acc_m[2] = {-INFINITY, -INFINITY}, acc_l[2] = {0.f, 0.f};
  const uint64_t q_desc = wgmma::desc_k_major(smem_addr(q_s) + uint32_t(cwg * 64 * 128));

  // S = Q·K_tᵀ of tile t, issued asynchronously as its own group: 8 k16 steps (64-dim block kk / 4,
  // 32 bytes a step inside it), the first one writing s (scale-d 0: no zeroing; it changes at most
  // the sign of an exactly zero score, which no later step can tell apart: every score is only
  // scaled, compared and subtracted from before its exp2).
  float s[kBN / 8][4];
  auto issue_scores = [&](int t) {
    const int st = t % kStages;
    mbar_wait(&full[st], unsigned(t / kStages) & 1u);  // tile t landed (tensor copies: visible to wgmma)
    const uint64_t k_desc = wgmma::desc_k_major(smem_addr(k_s + st * kKVBytes));
    wgmma::fence();  // s was last read by ordinary instructions
    wgmma::m64n64k16_ss_set(s, q_desc, k_desc);
#pragma unroll
    for (int kk = 1; kk < kD / 16; ++kk)
      wgmma::m64n64k16_ss(s, wgmma::desc_advance(q_desc, (kk / 4) * (kBM * 128) + (kk % 4) * 32),
                          wgmma::desc_advance(k_desc, (kk / 4) * (kBN * 128) + (kk % 4) * 32));
    wgmma::commit();
  };
  // Per tile: the softmax of S_t, O = P_t·V_t issued, then S_{t+1} issued behind it, so the
  // tensor cores compute S_{t+1} while this warpgroup merges the span (fold).
  // The arithmetic and its order are those of the serial loop (same bits); the softmax is done with
  // s before S_{t+1} overwrites it, so no second score buffer is needed.
  if (n_tiles > 0) issue_scores(0);
  int span_pos = t_lo % a.span_tiles;  // tile t's position inside its span (no division a tile)
  for (int t = 0; t < n_tiles; ++t) {
    const int tile = t_lo + t, tile_start = tile * kBN, st = t % kStages;
    const bool span_first = span_pos == 0, span_last = span_pos + 1 == a.span_tiles || t + 1 == n_tiles;
    span_pos = span_pos + 1 == a.span_tiles ? 0 : span_pos + 1;
    wgmma::wait<0>();  // S_t, the only group in flight
    wgmma::pin(s);
    if (t + 1 == n_tiles && tile_start + kBN > kv_end) {
      // The last tile ends inside it: its V rows from kv_end on may hold anything (a page not
      // requested keeps an older tile; a requested one, cache slots never written), and a masked
      // key's weight 0 times a NaN there would still be NaN. Zeroed (rows past kv_end are masked
      // for every row of the block), then every thread's zeros made visible to wgmma before P·V.
      mbar_wait(&full[st], unsigned(t / kStages) & 1u);
      const int r0 = kv_end - tile_start;
      for (int i = threadIdx.x - 128; i < (kBN - r0) * (kD / 8); i += active_warps * 32)
        *reinterpret_cast<uint4*>(v_s + st * kKVBytes + swizzled_offset(kBN, r0 + i / (kD / 8), i % (kD / 8))) =
            make_uint4(0u, 0u, 0u, 0u);
      fence_proxy_async_shared();
      asm volatile("bar.sync 1, %0;\n" ::"r"(active_warps * 32) : "memory");
    }
    scale_and_mask<kBN, kCap>(s, a, rp, tile_start, ctx, br.full_tile(a, tile_start, kBN), tig);
    float alpha[2];
    softmax_tile<kBN>(s, row_max, row_sum, alpha);
    // o is exactly +0 at a span's first tile (alpha ≥ 0 would keep it so): no rescale there.
    if constexpr (!kSpan1) {
      if (t > 0 && !span_first) rescale<kD>(o, alpha);
    } else {
#pragma unroll
      for (int i = 0; i < kD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    }
    uint32_t pf[kBN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) p_fragment<kBN>(pf[kk], s, kk);
    // V as the transposed B of P·V: 8-key groups 1024 bytes apart, its two 64-dim blocks kBN · 128.
    const uint64_t v_desc = wgmma::desc(smem_addr(v_s + st * kKVBytes), kBN * 128, 1024);
    wgmma::fence();  // o and pf were written by ordinary instructions
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)  // keys 16kk..16kk+15: two 8-key groups; dims in two 64-wide blocks
      wgmma::m64n128k16_rs_bt(o, pf[kk], wgmma::desc_advance(v_desc, kk * 16 * 128));
    wgmma::commit();
    if (t + 1 < n_tiles) {
      issue_scores(t + 1);
      wgmma::wait<1>();  // O += P_t·V_t done; S_{t+1} may still run
    } else {
      wgmma::wait<0>();
    }
    wgmma::pin(o);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with stage st (K_t and V_t)
    if (kSpan1 || span_last) fold_span<kD, !kSpan1>(acc_o, acc_m, acc_l, o, row_max, row_sum);
  }
  wgmma::wait<0>();  // (nothing in flight here; said, so the compiler need not insert it)
  // (Every requested tile was waited for: no copy outlives the block.)
  store_folded<kD>(a, acc_o, acc_l, rp, m0 + warp * 16 + g, q_begin, kvh, tig);
#else
  __trap();  // not built for sm_90a: the host never launches this (attention_wgmma_available)
#endif
}

}  // namespace

// Every CUDA source is built for the same architectures: the GEMM's probe of the sm_90a code
// answers for this file too.
bool attention_wgmma_available() { return gemm_detail::gemm_wgmma_available(); }

namespace {
std::atomic<uint64_t> g_launches{0};

// The cache [num_slots, hkv, 128] bf16 as a 3-D tensor (dims innermost first) read in boxes of
// 64 dims × 1 head × box_rows slots, 128-byte swizzled.
CUtensorMap cache_map(const bf16* cache, int hkv, int64_t num_slots, int box_rows) {
  const cuuint64_t dims[3] = {cuuint64_t(kD), cuuint64_t(hkv), cuuint64_t(num_slots)};
  const cuuint64_t strides[2] = {cuuint64_t(kD) * 2, cuuint64_t(hkv) * kD * 2};
  const cuuint32_t box[3] = {64, 1, cuuint32_t(box_rows)};
  return swizzled_bf16_map(cache, 3, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "attention");
}
}  // namespace

bool attention_wgmma_fits(const AttnKernelArgs& k, int64_t num_slots) {
  return k.splits == 1 && k.span_tiles >= 1 && k.block_shift >= 3 && num_slots > 0 &&
         num_slots <= (int64_t(1) << 32) && reinterpret_cast<uintptr_t>(k.k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(k.v_cache) % 16 == 0;
}

uint64_t attention_wgmma_launches() { return g_launches.load(); }

void launch_attention_wgmma(const AttnKernelArgs& k, unsigned m_tiles, int hkv, int num_rows, int64_t num_slots,
                            cudaStream_t stream) {
  if (!attention_wgmma_available())
    throw_error("[attention] the warpgroup attention kernel needs an sm_90 GPU and a build for sm_90a "
                "(RILL_CUDA_ARCHITECTURES=90a)");
  if (!attention_wgmma_fits(k, num_slots))
    throw_error("[attention] the warpgroup kernel runs the fold schedule over a cache of power-of-two blocks of "
                "at least 8 slots");
  static const bool attr_set = [] {
    for (const void* f : {reinterpret_cast<const void*>(attention_wgmma_kernel<0, false>),
                          reinterpret_cast<const void*>(attention_wgmma_kernel<1, false>),
                          reinterpret_cast<const void*>(attention_wgmma_kernel<0, true>),
                          reinterpret_cast<const void*>(attention_wgmma_kernel<1, true>)})
      RILL_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    return true;
  }();
  (void)attr_set;
  const int box_rows = 1 << std::min(k.block_shift, 6);
  const CUtensorMap tk = cache_map(k.k_cache, hkv, num_slots, box_rows);
  const CUtensorMap tv = cache_map(k.v_cache, hkv, num_slots, box_rows);
  const dim3 grid(m_tiles, unsigned(hkv), unsigned(num_rows));
  const bool cap = k.softcap > 0.f, span1 = k.span_tiles == 1;
  if (cap && span1) launch_pdl(attention_wgmma_kernel<1, true>, grid, dim3(kThreads), kSmemBytes, stream, tk, tv, k);
  else if (cap) launch_pdl(attention_wgmma_kernel<1, false>, grid, dim3(kThreads), kSmemBytes, stream, tk, tv, k);
  else if (span1) launch_pdl(attention_wgmma_kernel<0, true>, grid, dim3(kThreads), kSmemBytes, stream, tk, tv, k);
  else launch_pdl(attention_wgmma_kernel<0, false>, grid, dim3(kThreads), kSmemBytes, stream, tk, tv, k);
  RILL_CUDA_CHECK_LAUNCH();
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace rill::cuda::attention_detail
