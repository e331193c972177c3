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
// K/V tiles are gathered through the block table with cp.async into 128-byte-swizzled tiles
// (wgmma.cuh), kStages deep, every thread copying its rows of each tile; a tile's block-table
// slots are read one tile ahead of its copies, so no copy waits for a table read.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace rill::cuda::attention_detail {
namespace {

constexpr int kD = 128, kBN = 64, kWGs = 2, kBM = 64 * kWGs, kThreads = 128 * kWGs, kStages = 4;
constexpr int kQBytes = kBM * kD * 2;   // two 64-dim blocks of kBM rows × 128 bytes
constexpr int kKVBytes = kBN * kD * 2;  // one K or V tile: two 64-dim blocks of kBN rows
constexpr size_t kSmemBytes = size_t(kQBytes) + size_t(2 * kStages) * kKVBytes + 1024;  // + alignment slack
static_assert(kBN == kSpanKeys, "a span holds whole tiles");

// kCap: with a softcap (1) or without (0): two kernels, neither carrying the other's code.
template <int kCap>
__global__ void __launch_bounds__(kThreads, 1) attention_wgmma_kernel(AttnKernelArgs a) {
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
  const int64_t slot_stride = int64_t(a.hkv) * kD;

  // Read through a shuffle: the compiler then knows the warpgroup index is warp-uniform.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const bool wg_active = m0 + wg * 64 < packed;  // uniform over the warpgroup (wgmma needs all of it)

  // Q tile: packed row m → token q_begin + m / group, head kvh · group + m % group (its copies join
  // the first tile's group).
  for (int i = threadIdx.x; i < kBM * (kD / 8); i += kThreads) {
    const int r = i / (kD / 8), c = i % (kD / 8), m = m0 + r;
    const bool ok = m < packed;
    const bf16* src = ok ? a.q + ((int64_t(q_begin) + m / a.group) * a.hq + kvh * a.group + m % a.group) * kD + c * 8
                         : a.q;
    cp_async16(q_s + swizzled_offset(kBM, r, c), src, ok);
  }
  // Stage s holds tiles s, s + kStages, ...: "full" completes when every thread's copies of the
  // tile landed (one arrival a thread), "empty" when every warp is done reading it (one a warp).
  // A warpgroup waits only for the tile it multiplies and, before refilling a stage, for the
  // warps still reading the tile it held, so the two warpgroups may drift apart (measured: no
  // gain over one block barrier a tile, which it matched within 2-4%; docs/design-notes.md).
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(&full[st], kThreads);
      mbar_init(&empty[st], kThreads / 32);
    }
    mbar_init_fence();
  }
  __syncthreads();
  TileSlots<kD, kBN, kThreads> slots;  // the block-table slots of the next tile to request
  auto request = [&](int t) {          // tile t's K and V into stage t % kStages (slots loaded)
    slots.copy_swizzled(k_s + (t % kStages) * kKVBytes, a.k_cache, slot_stride, kvh);
    slots.copy_swizzled(v_s + (t % kStages) * kKVBytes, a.v_cache, slot_stride, kvh);
    mbar_arrive_on_copies(&full[t % kStages]);
    if (t + 1 < n_tiles) slots.load(table, a.block_size, a.block_shift, (t_lo + t + 1) * kBN, kv_end);
  };
  if (n_tiles > 0) slots.load(table, a.block_size, a.block_shift, t_lo * kBN, kv_end);
  for (int t = 0; t < kStages - 1 && t < n_tiles; ++t) request(t);

  const RowPos rp = RowPos::of(br, a, warp, g);
  float o[kD / 8][4], acc_o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) {
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.f;
  }
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  float acc_m[2] = {-INFINITY, -INFINITY}, acc_l[2] = {0.f, 0.f};
  const uint64_t q_desc = wgmma::desc_k_major(smem_addr(q_s) + uint32_t(wg * 64 * 128));

  // S = Q·K_tᵀ of tile t, issued asynchronously as its own group: 8 k16 steps (64-dim block kk / 4,
  // 32 bytes a step inside it), the first one writing s (scale-d 0: no zeroing; it changes at most
  // the sign of an exactly zero score, which no later step can tell apart: every score is only
  // scaled, compared and subtracted from before its exp2).
  float s[kBN / 8][4];
  auto issue_scores = [&](int t) {
    const int st = t % kStages;
    mbar_wait(&full[st], unsigned(t / kStages) & 1u);  // tile t (and Q, copied before tile 0) landed
    fence_proxy_async_shared();                         // ... and is visible to wgmma
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
  // tensor cores compute S_{t+1} while this warpgroup merges the span (fold) and refills a stage.
  // The arithmetic and its order are those of the serial loop (same bits); the softmax is done with
  // s before S_{t+1} overwrites it, so no second score buffer is needed.
  if (wg_active && n_tiles > 0) issue_scores(0);
  int span_pos = t_lo % a.span_tiles;  // tile t's position inside its span (no division a tile)
  for (int t = 0; t < n_tiles; ++t) {
    const int tile = t_lo + t, tile_start = tile * kBN, st = t % kStages;
    const bool span_first = span_pos == 0, span_last = span_pos + 1 == a.span_tiles || t + 1 == n_tiles;
    span_pos = span_pos + 1 == a.span_tiles ? 0 : span_pos + 1;
    if (wg_active) {
      wgmma::wait<0>();  // S_t, the only group in flight
      wgmma::pin(s);
      scale_and_mask<kBN, kCap>(s, a, rp, tile_start, ctx, br.full_tile(a, tile_start, kBN), tig);
      float alpha[2];
      softmax_tile<kBN>(s, row_max, row_sum, alpha);
      // o is exactly +0 at a span's first tile (alpha ≥ 0 would keep it so): no rescale there.
      if (t > 0 && !span_first) rescale<kD>(o, alpha);
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
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with stage st (K_t and V_t)
    if (wg_active && span_last) fold_span<kD>(acc_o, acc_m, acc_l, o, row_max, row_sum);
    // Refill the stage tile t - 1 held with tile t + kStages - 1, once every warp is done with t - 1.
    const int next = t + kStages - 1;
    if (next < n_tiles) {
      if (t > 0) mbar_wait(&empty[(t - 1) % kStages], unsigned((t - 1) / kStages) & 1u);
      request(next);
    }
  }
  cp_async_wait<0>();  // no copy outlives the block
  if (!wg_active) return;
  store_folded<kD>(a, acc_o, acc_l, rp, m0 + warp * 16 + g, q_begin, kvh, tig);
#else
  __trap();  // not built for sm_90a: the host never launches this (attention_wgmma_available)
#endif
}

}  // namespace

// Every CUDA source is built for the same architectures: the GEMM's probe of the sm_90a code
// answers for this file too.
bool attention_wgmma_available() { return gemm_detail::gemm_wgmma_available(); }

void launch_attention_wgmma(const AttnKernelArgs& k, unsigned m_tiles, int hkv, int num_rows, cudaStream_t stream) {
  if (!attention_wgmma_available())
    throw_error("[attention] the warpgroup attention kernel needs an sm_90 GPU and a build for sm_90a "
                "(RILL_CUDA_ARCHITECTURES=90a)");
  if (k.span_tiles < 1 || k.splits != 1) throw_error("[attention] the warpgroup kernel runs the fold schedule only");
  static const bool attr_set = [] {
    RILL_CUDA_CHECK(
        cudaFuncSetAttribute(attention_wgmma_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    RILL_CUDA_CHECK(
        cudaFuncSetAttribute(attention_wgmma_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    return true;
  }();
  (void)attr_set;
  const dim3 grid(m_tiles, unsigned(hkv), unsigned(num_rows));
  if (k.softcap > 0.f) launch_pdl(attention_wgmma_kernel<1>, grid, dim3(kThreads), kSmemBytes, stream, k);
  else launch_pdl(attention_wgmma_kernel<0>, grid, dim3(kThreads), kSmemBytes, stream, k);
  RILL_CUDA_CHECK_LAUNCH();
}

}  // namespace rill::cuda::attention_detail
