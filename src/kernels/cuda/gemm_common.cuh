// kernels/cuda/gemm_common.cuh — what the batch-invariant GEMM kernels share (gemm.cu, the
// tiled kernel; gemm_stream.cu, the streaming decode kernel; gemm_wgmma.cu and gemm_wgmma_decode.cu,
// the Hopper warpgroup kernels): the launch arguments,
// the output addressing of fused projections, and the sm_90 mbarrier / bulk-copy primitives.
// Device code only.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/partials.cuh"

namespace rill::cuda::gemm_detail {

struct GemmKernelArgs {
  const bf16* x;
  const bf16* w;
  bool w_panels;  // w in the k-panel layout (GemmArgs::w_panels)
  const bf16* bias;
  bf16* ys[GemmArgs::kMaxOuts];         // output ranges of columns (one when not fused)
  int64_t y_end[GemmArgs::kMaxOuts];    // their end columns; the last is n
  int ny;
  bool pairs;                           // every output's width is even: write column pairs
  float* ws;  // [splits, m, n] in the split schedule
  unsigned* counters;                   // per-tile arrivals (split schedule), or null
  int64_t m, n, k;
  int64_t ks;  // elements of K per split range
  int splits;
  int tiles_per_split;  // ks / BK
  int l2_prefetch;      // decode: weight tiles requested into L2 ahead of the shared-memory stages
  int prewait_stages;   // warpgroup decode: weight stages requested before the wait (≥ kStages: all;
                        // on the host, -1: the backend's setting)
  int prewait_fill;     // warpgroup decode: stages filled before the wait, prewait_stages in flight (0: off)
  bool late_trigger;    // warpgroup decode: the next kernel may launch once the last weight tile is requested
  bool exit_trigger;    // warpgroup decode: no trigger at all — the next kernel launches as this grid completes
  bool split_schedule;
  bool defer_fold;  // warpgroup decode, split schedule: write the partials only (GemmArgs::defer)
};

// The address of product element (row, col) in the output holding column col.
__device__ __forceinline__ bf16* out_at(const GemmKernelArgs& a, int64_t row, int64_t col) {
  int64_t begin = 0;
#pragma unroll
  for (int s = 0; s < GemmArgs::kMaxOuts; ++s) {
    if (s + 1 == a.ny || col < a.y_end[s]) return a.ys[s] + row * (a.y_end[s] - begin) + (col - begin);
    begin = a.y_end[s];
  }
  return a.ys[0];  // unreachable: ny ≥ 1
}

// The output holding column col: the address of its element (0, col); its row stride (that
// output's width) in `width` and its end column in `end`.
__device__ __forceinline__ bf16* out_col(const GemmKernelArgs& a, int64_t col, int64_t& width, int64_t& end) {
  int64_t begin = 0;
#pragma unroll
  for (int s = 0; s < GemmArgs::kMaxOuts; ++s) {
    if (s + 1 == a.ny || col < a.y_end[s]) {
      width = a.y_end[s] - begin;
      end = a.y_end[s];
      return a.ys[s] + (col - begin);
    }
    begin = a.y_end[s];
  }
  width = end = a.n;
  return a.ys[0];  // unreachable: ny ≥ 1
}

using rill::cuda::fold_partials;

// ---- the bulk copy engine (sm_90): 1-D copies global → shared completing on an mbarrier ----
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#endif
}

// The same with an L2 eviction policy (the decode kernel's weight tiles, read once a step).
__device__ __forceinline__ void bulk_copy_hint(void* dst, const void* src, unsigned bytes, uint64_t* bar,
                                               uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
#endif
}

// A hint, no data moves to the SM: the bytes [src, src + bytes) are fetched into L2.
__device__ __forceinline__ void l2_prefetch(const void* src, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#endif
}

/// Launches the warpgroup (wgmma + tensor-copy) kernel for a fold-schedule GEMM (gemm_wgmma.cu):
/// variant 0 / 1: 5 stages, one CTA a tile / persistent CTAs (one an SM); 2 / 3: the same with 6
/// stages; 4: one split range a CTA, its partial written to a.ws (ws_bytes), which the caller
/// then folds with gemm_reduce_kernel (configurations 11-15); 5 / 6: persistent 128 × 192 tiles with
/// 5 / 4 stages (configurations 16, 17: opt-in, RILL_GEMM_WIDE_TILE; 17 measures the stage count);
/// 7: persistent, 5 stages, SwiGLU in the epilogue (w is [gate; up], y [m, n / 2]; GemmArgs::glu_inter);
/// 8, 9: 1 and 7 in multicast pairs; 10, 11: 1 and 7 on the stream schedule (every CTA the same share of
/// the tiles' split ranges; a.ws holds stream_workspace_bytes of published totals, a.counters
/// stream_flags zeroed flags, reset by their readers). Same bits.
void launch_gemm_wgmma(const GemmKernelArgs& a, int variant, int num_sms, size_t ws_bytes, cudaStream_t stream);
/// The stream schedule's workspace (a published 128 × 128 f32 total a CTA) and flags (one a CTA).
size_t stream_workspace_bytes(int num_sms);
int stream_flags(int num_sms);
/// The streaming decode kernel (gemm_stream.cu), configuration 7 (two CTAs an SM) or 8 (three);
/// M ≤ 16, at most 8 split ranges.
void launch_gemm_stream(const GemmKernelArgs& a, int config, cudaStream_t stream);
/// Decode on warpgroup MMA (gemm_wgmma.cu): configurations 18 (variant 0, M ≤ 8) and 19 (variant
/// 1, M ≤ 64), 64-column tiles: split ranges as separate work items folded by each tile's last
/// one when the workspace and counters fit, else one item a tile walks every range; persistent
/// CTAs (at most a wave of them) take the items in turn. a.defer_fold: the split schedule writes
/// the partials only (no fold). Variant 2: SwiGLU in the fold (8, 16, 32 or 64 x rows by M ≤ 64; a.exit_trigger:
/// no programmatic trigger). Returns whether the split schedule ran.
/// The split schedule's reduction kernel (a.ws [splits, m, n] into the outputs) and the fallback
/// kernel for shapes the tensor-core kernels cannot load (gemm_fold.cu).
void launch_gemm_reduce(const GemmKernelArgs& a, cudaStream_t stream);
void launch_gemm_fallback(const GemmKernelArgs& a, cudaStream_t stream);
bool launch_gemm_wgmma_decode(const GemmKernelArgs& a, int variant, size_t ws_bytes, int64_t num_counters,
                              int num_sms, cudaStream_t stream);
/// One wave of the decode SwiGLU variant's CTAs at M rows: resident CTAs an SM × the SMs.
int64_t decode_glu_slots(int64_t m, int num_sms);
// Configuration 18 with the RoPE op of GemmArgs::rope in its epilogue (gemm_wgmma_decode.cu): false,
// launching nothing, where it does not fit (M ≤ 2, head_dim 128 at full rotary, 2, 4 or 8 split ranges,
// q, k and v the three outputs, a cache, the heads' clusters in one wave).
bool decode_rope_fits(const GemmKernelArgs& k, const RopeArgs& r);
bool launch_gemm_wgmma_decode_rope(const GemmKernelArgs& k, const RopeArgs& r, int num_sms, cudaStream_t stream);
/// A bf16 weight [rows, k] read in box_rows × 64-k boxes with the 128-byte swizzle (the warpgroup
/// kernels' w tiles; gemm_wgmma.cu).
CUtensorMap weight_tile_map(const bf16* w, int64_t rows, int64_t k, int box_rows, int promotion_bytes = 256);
/// The decode kernels' launch policy (gemm_wgmma_decode.cu; the backend sets them at start): whether the
/// next kernel may launch only once a CTA requested its last weight tile, and the resident CTAs an
/// SM (0: as many as fit).
extern bool g_decode_late_trigger;
extern int g_decode_ctas_per_sm;
/// Whether this build carries the sm_90a warpgroup kernel and the device runs it (probed once).
bool gemm_wgmma_available();

}  // namespace rill::cuda::gemm_detail
