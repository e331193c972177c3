// kernels/cuda/ops.h — host launchers of the CUDA kernels, one per op (defined in <op>.cu).
// They take raw device pointers whose shapes backend.cpp has already checked; they enqueue on
// the given stream, check the launch, and never synchronise. Nothing here allocates.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace rill::cuda {

/// An input still held as a decode GEMM's split-K partials (GemmPartials: the GEMM left its fold to
/// the op that reads the product). Element (row, c) of the input is product column col0 + c:
/// bf16(((0 + p_0) + p_1) + ... + bias[col0 + c]) with p_r = ws[r · plane + row · n + col0 + c] —
/// the fold the GEMM would have run, so the bits are the same. A consumer reading it also stores the
/// folded values into the input tensor, which then holds what the GEMM would have written.
struct PartialsIn {
  const float* ws = nullptr;   ///< null: the input is stored as bf16
  const void* bias = nullptr;  ///< bf16 [n] of the product, or null
  int64_t n = 0;               ///< the product's columns (a partial row's stride)
  int64_t plane = 0;           ///< m · n: one range's partials
  int64_t col0 = 0;            ///< the input's first product column
  int splits = 0;
};
/// Whether a consumer may read `p` eight elements at a time (16-byte loads of each range's partials).
inline bool partials_vec8(const PartialsIn& p) {
  return p.ws && p.n % 4 == 0 && p.col0 % 8 == 0 && reinterpret_cast<uintptr_t>(p.ws) % 16 == 0;
}
/// dst[rows, cols] (bf16, row stride cols) = the folded input `p` (the consumers' fallback).
void launch_fold_into(const PartialsIn& p, void* dst, int64_t rows, int64_t cols, cudaStream_t stream);

struct RmsNormArgs {
  const void* x = nullptr;   ///< bf16 [rows, dim]
  void* residual = nullptr;  ///< bf16 [rows, dim]; when set: residual += x, normalise residual
  const void* w = nullptr;   ///< [dim], w_dtype
  DType w_dtype = DType::bf16;
  void* y = nullptr;         ///< bf16 [rows, dim]
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;
  bool one_plus_weight = false;
  bool scale_in_fp32 = false;
  PartialsIn x_partials;     ///< x still as partials (x then receives its folded values)
};
void launch_rms_norm(const RmsNormArgs& a, cudaStream_t stream);
/// Rows of 1,025-8,192 (the register path's block-a-row rows) normalised by a thread-block cluster of
/// `blocks` (2, 4, 8 or 16; 0: one block a row; -1, the default: 8, 4 or 2 while the rows' clusters fit
/// one wave of `num_sms` SMs, one block beyond) instead of one block: each block loads and normalises
/// its share of the row's elements and pushes its warps' sums of squares into every block of the
/// cluster (st.async), where the one-block kernel's block_sum adds them — the same operations, the same
/// bits. RILL_NORM_CLUSTER. num_sms 0 keeps the count set before (132 at first).
void set_norm_cluster(int blocks, int num_sms = 0);
int norm_cluster();
/// The rule of the row kernels that run on a cluster of blocks a row while the rows are few (the add +
/// RMSNorm, the argmax): 8, 4 or 2 blocks a row while the rows' clusters fit one wave of `sms` SMs, else 0
/// (one block a row: the rows alone spread over the SMs).
inline int row_cluster_blocks(int64_t rows, int sms) {
  for (int c = 8; c >= 2; c /= 2)
    if (rows * c <= sms) return c;
  return 0;
}

struct RopeArgs {
  void* q = nullptr;                ///< bf16 [tokens, hq, head_dim], rotated in place
  void* k = nullptr;                ///< bf16 [tokens, hkv, head_dim], rotated in place
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;  ///< [rotary_dim / 2]
  int64_t tokens = 0;
  int hq = 0, hkv = 0, head_dim = 0, rotary_dim = 0;
  float attention_factor = 1.f;
  // Fused store (rope_store_kv) when k_cache is set: rotated k and v go to slot_mapping.
  const void* v = nullptr;
  const int32_t* slot_mapping = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t num_slots = 0;  ///< slots ≥ num_slots are skipped like negative ones
  // Per-head RMSNorm before the rotation when q_norm is set (norm_rope_store_kv): the arithmetic
  // of launch_rms_norm's warp-per-row kernel (head_dim % 8 == 0, q and k 16-byte aligned).
  const void* q_norm = nullptr;  ///< [head_dim], f32 or bf16 (norm_f32)
  const void* k_norm = nullptr;
  bool norm_f32 = false, norm_one_plus = false, norm_fp32_scale = false;
  float norm_eps = 1e-6f;
  bool early_trigger = false;  ///< set by launch_rope from pdl_rope_early_trigger()
  /// q, k, v still as partials of one GEMM (q, k and v then receive their values: q and k rotated).
  PartialsIn q_partials, k_partials, v_partials;
};
void launch_rope(const RopeArgs& a, cudaStream_t stream);
/// Whether the batch-invariant decode attention kernels at `head_dim` can run this RoPE op inside
/// their blocks (AttentionArgs::rope): full rotary at head_dim 64 / 128, a cache to store into,
/// the aligned layout and deferred inputs the chunk kernel folds on load.
bool rope_fits_decode_attention(const RopeArgs& a, int head_dim);

/// Copies k/v rows ([tokens, row_elems] bf16) to the caches at slot_mapping (slots outside
/// [0, num_slots) are skipped: padding tokens).
void launch_store_kv(const void* k, const void* v, const int32_t* slot_mapping, void* k_cache,
                     void* v_cache, int64_t tokens, int64_t row_elems, int64_t num_slots, cudaStream_t stream);

struct AttentionArgs {
  const void* q = nullptr;  ///< bf16 [tokens, hq, head_dim]
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;  ///< bf16 [num_blocks, block_size, hkv, head_dim]
  void* out = nullptr;            ///< bf16 [tokens, hq, head_dim]
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t tokens = 0;
  int num_rows = 0;
  int max_blocks_per_row = 0;
  int block_size = 0;
  int max_seqlen_q = 0;
  int max_context_len = 0;
  int hq = 0, hkv = 0, head_dim = 0;
  float scale = 1.f;
  int sliding_window = 0;
  float softcap = 0.f;
  // Split-KV workspace (f32); may be null, then no split is used.
  float* workspace = nullptr;
  size_t workspace_bytes = 0;
  int num_sms = 132;
  int force_splits = 0;  ///< > 0: use exactly this many splits (tests, benchmarks)
  int force_warps = 0;   ///< > 0: warps per block (1, 2, 4, 8), else chosen from max_seqlen_q
  int force_bn = 0;      ///< > 0: keys per tile (32, 64), else chosen from head_dim and warps
  /// Batch-invariant: KV split at fixed absolute boundaries, fixed keys per tile (force_bn is
  /// ignored; force_splits 1 forces the fold schedule, > 1 the split one where it fits; the
  /// results are the same bits); see attention.cu.
  bool invariant = false;
  /// Invariant mode: KV positions per span, a multiple of 64 (0: the default, 64 keys at
  /// head_dim ≤ 128 and 256 at 256). Part of the arithmetic: every call of a process must use
  /// the same value.
  int span_keys = 0;
  /// Invariant split schedule at decode (the four-warp kernel): blocks a (row, kv head), each
  /// walking every span_blocks-th span (0: split_schedule.h's rule, waves against walk length). Not part
  /// of the arithmetic: any value gives the same bits (tests, benchmarks).
  int span_blocks = 0;
  /// Slots in each cache (num_blocks · block_size); 0: unknown (then no kernel that addresses the
  /// cache through tensor maps runs).
  int64_t num_slots = 0;
  /// The RoPE op (norm_rope_store_kv) of this attention's q, not yet run: q, k and v are
  /// unrotated (or still a GEMM's partials) and the step's K/V not in the cache. The batch-invariant
  /// decode kernels run it inside their blocks (rope_fits_decode_attention, ≤ kMaxRopeTokens query
  /// tokens a row); every other path launches it first. Same bits either way.
  const RopeArgs* rope = nullptr;
};
/// Query tokens a row up to which the decode attention runs the RoPE op inside its blocks (decode,
/// and speculative verification of up to 3 drafted tokens; its tables fit the kernels' spare
/// shared memory).
inline constexpr int kMaxRopeTokens = 4;
void launch_attention(const AttentionArgs& a, cudaStream_t stream);

/// y[M, I] = bf16(bf16(silu(x[:, :I])) * x[:, I:]) for bf16 x [M, 2I].
void launch_swiglu(const void* x, void* y, int64_t m, int64_t inter, cudaStream_t stream,
                   const PartialsIn& x_partials = {});
/// out bf16 [T, H] = table[ids]; out-of-range ids give zero rows.
void launch_embedding(const int32_t* ids, const void* table, DType table_dtype, void* out, int64_t tokens,
                      int64_t hidden, int64_t vocab, cudaStream_t stream);
/// out = a + b elementwise (f32 or bf16, all the same dtype).
void launch_add(const void* a, const void* b, void* out, int64_t n, DType dtype, cudaStream_t stream);
/// out[r] = x[index[r]] for rows of row_bytes bytes; out-of-range indices give zero rows.
void launch_gather_rows(const void* x, const int32_t* index, void* out, int64_t rows, int64_t row_bytes,
                        int64_t src_rows, cudaStream_t stream);
/// out i32 [rows] = argmax per row of x [rows, cols] (f32 or bf16); lowest index wins ties, NaN is largest.
/// Rows are read by clusters of 8, 4 or 2 blocks while the rows' clusters fit one wave of the SMs (sm_90+).
void launch_argmax(const void* x, DType dtype, int32_t* out, int64_t rows, int64_t cols, cudaStream_t stream);
/// Blocks a row of launch_argmax: -1 the rule (8, 4 or 2 while rows × blocks ≤ num_sms, else 1), or that
/// many blocks at every batch (0 or 1: one block a row, the only choice below sm_90). num_sms 0 keeps the
/// SM count set before.
void set_argmax_cluster(int blocks, int num_sms = 0);
int argmax_cluster_for(int64_t rows, int forced, int sms);
/// out f32 [rows, cols] = softmax per row of x (f32 or bf16).
void launch_softmax(const void* x, DType dtype, float* out, int64_t rows, int64_t cols, cudaStream_t stream);
/// Copies whole KV blocks src_dst[i, 0] → src_dst[i, 1] ([n, 2] i32 on device) in k and v; ids
/// outside [0, num_blocks) are skipped.
void launch_copy_kv_blocks(void* k_cache, void* v_cache, const int32_t* src_dst, int64_t n, int64_t block_bytes,
                           int64_t num_blocks, cudaStream_t stream);
/// Elementwise f32/f16/bf16 conversion (round to nearest even).
void launch_convert(const void* x, DType from, void* out, DType to, int64_t n, cudaStream_t stream);

struct MatvecArgs {
  const void* x = nullptr;     ///< bf16 [m, k], 16-byte aligned rows
  const void* w = nullptr;     ///< bf16 [n, k]
  const void* bias = nullptr;  ///< bf16 [n] or null
  void* y = nullptr;           ///< bf16 [m, n]
  int m = 0;                   ///< 1..8
  int64_t n = 0, k = 0;        ///< k % 8 == 0
  int splits = 1;              ///< split-K factor; > 1 needs workspace of splits * m * n floats
  float* workspace = nullptr;
};
/// Skinny GEMM for m ≤ 8: streams w once with 16-byte loads; split-K reduces in a second kernel.
void launch_matvec(const MatvecArgs& a, cudaStream_t stream);
/// Split-K factor the heuristic picks for a matvec shape on a GPU with num_sms SMs.
int matvec_default_splits(int64_t n, int64_t k, int num_sms);

// ---- Gated DeltaNet (linear-attention) ops: gated_delta.cu, conv1d.cu, gdn_elementwise.cu.
// Activations are bf16 or f32 (act_dtype, one dtype per call); state and gates are f32.

/// A StateBatch on the device: rows' tokens laid end to end, one state slot per row.
struct StateRowsArgs {
  const int32_t* cu_seqlens = nullptr;  ///< [num_rows + 1]
  const int32_t* slots = nullptr;       ///< [num_rows]; a slot outside [0, num_slots) poisons the row's output with NaN
  const int32_t* has_state = nullptr;   ///< [num_rows]; 0: start from zeros
  int num_rows = 0;
  int64_t num_slots = 0;
};

/// y[T, C] = (silu)(Σ_k w[c,k]·window) per channel, window = [conv_state[slot] (K-1) ‖ x rows]; then
/// conv_state[slot] ← the window's last K-1 inputs. w f32 [C, K]; conv_state f32 [slots, K-1, C]; K ≤ 8.
void launch_causal_conv1d(const void* x, const float* w, float* conv_state, void* y, DType act_dtype,
                          const StateRowsArgs& rows, int64_t tokens, int64_t channels, int kernel_width, bool silu,
                          cudaStream_t stream);

struct DeltaRuleArgs {
  const void* q = nullptr;  ///< [T, Hk, dk] act_dtype
  const void* k = nullptr;  ///< [T, Hk, dk]
  const void* v = nullptr;  ///< [T, Hv, dv]
  const float* g = nullptr;     ///< [T, Hv]
  const float* beta = nullptr;  ///< [T, Hv]
  float* state = nullptr;       ///< [slots, Hv, dk, dv]
  void* out = nullptr;          ///< [T, Hv, dv] act_dtype
  DType act_dtype = DType::bf16;
  StateRowsArgs rows;
  int64_t tokens = 0;
  int hk = 0, hv = 0, dk = 0, dv = 0;  ///< dk ∈ {16, 32, 64, 128, 256}
  float scale = 1.f;
  int chunk = 64;  ///< tokens per chunk of the chunked kernel, in [1, 64]
  /// Per-row routing (DeltaRuleForm::automatic): the kernel leaves alone every row whose number of
  /// new tokens lies outside [min_row_tokens, max_row_tokens], so two launches split one batch by
  /// each row's own length (a row's arithmetic never depends on the other rows).
  int64_t min_row_tokens = 0, max_row_tokens = INT64_MAX;
};
/// The gated delta rule, token by token per (row, value head, dv slice); see gated_delta.cu.
void launch_gated_delta_rule(const DeltaRuleArgs& a, cudaStream_t stream);
/// The same op in chunks of a.chunk tokens (prefill); see gated_delta_chunked.cu (not yet validated on hardware).
void launch_gated_delta_rule_chunked(const DeltaRuleArgs& a, cudaStream_t stream);

/// y[rows, dim] = scale·x·rsqrt(Σx² + eps) per row (x and y may alias).
void launch_l2_norm(const void* x, void* y, DType act_dtype, int64_t rows, int64_t dim, float eps, float scale,
                    cudaStream_t stream);
/// y = rmsnorm(x)·w·silu(z) per row, w f32 [dim] (x and y may alias).
void launch_gated_rms_norm(const void* x, const void* z, const float* w, void* y, DType act_dtype, int64_t rows,
                           int64_t dim, float eps, cudaStream_t stream);
/// g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b); a, b [T, H] act_dtype; g, beta f32.
void launch_gdn_gates(const void* a, const void* b, DType act_dtype, const float* a_log, const float* dt_bias,
                      float* g, float* beta, int64_t tokens, int64_t heads, cudaStream_t stream);
/// out = x·sigmoid(gate), n elements of act_dtype (out may alias x).
void launch_sigmoid_mul(const void* x, const void* gate, void* out, DType act_dtype, int64_t n, cudaStream_t stream);

struct GemmArgs {
  const void* x = nullptr;     ///< bf16 [m, k], 16-byte aligned
  const void* w = nullptr;     ///< bf16 [n, k], 16-byte aligned
  /// w is stored as k-panels (launch_to_panels), not row-major: the warpgroup GEMMs (decode
  /// configurations 18, 19 and the prefill configurations 11-17) read it; no other path can.
  bool w_panels = false;
  const void* bias = nullptr;  ///< bf16 [n] or null
  void* y = nullptr;           ///< bf16 [m, n], 4-byte aligned
  int64_t m = 0, n = 0, k = 0; ///< k % 8 == 0
  float* workspace = nullptr;  ///< split partials (f32); may be null (then one CTA folds every split)
  size_t workspace_bytes = 0;
  int num_sms = 132;
  /// 0 = by M; tests, benchmarks: 1, 5, 6 tiled decode, 2 mid, 3 / 4 prefill, 7, 8 streaming decode
  /// (M ≤ 16), 9, 10 bulk-copy decode, 11-17 warpgroup (sm_90a), 18, 19 warpgroup decode (M ≤ 8 / ≤ 64, sm_90a),
  /// 20 warpgroup on the stream schedule (sm_90a; needs 2+ split ranges, the workspace and the counters)
  int config = 0;
  /// Outputs split by columns (fused projections): when num_outs > 0, outs[s] holds the product's
  /// columns [out_end[s - 1], out_end[s]) with that width as its row stride, and y is unused
  /// (Qwen3.5's GDN input projection has six outputs).
  /// The last out_end is n. Each width a multiple of 8, each output 16-byte aligned.
  static constexpr int kMaxOuts = 6;
  void* outs[kMaxOuts] = {};
  int64_t out_end[kMaxOuts] = {};
  int num_outs = 0;
  /// Zeroed per-tile arrival counters: with them the split schedule's last CTA of a tile folds
  /// the partials in range order itself (no second kernel); every launch leaves them zero again.
  unsigned* counters = nullptr;
  int64_t num_counters = 0;
  /// SwiGLU fused into the epilogue (> 0): w is [gate; up] with n = 2 · glu_inter rows and y, [m,
  /// glu_inter], receives bf16(bf16(silu(g)) · u) of the product's bf16 columns g = [0, glu_inter) and
  /// u = [glu_inter, n) — the bits of this GEMM then launch_swiglu. The warpgroup kernel (sm_90a)
  /// only; glu_inter % 64 == 0, no fused outputs (gemm_swiglu_fits).
  int64_t glu_inter = 0;
  /// The warpgroup decode GEMM's SwiGLU (configurations 18 at M ≤ 8, 19 at M ≤ 64): 0 the split
  /// schedule where the workspace and counters hold it (each tile's last CTA folds the ranges, then
  /// the SwiGLU); 1 the fold schedule (no workspace: one CTA a column tile walks its ranges in
  /// order and ends with the SwiGLU of its own sums); 2 the fold schedule launching the next kernel
  /// only as the grid completes. Same bits for any value.
  int glu_schedule = 0;
  /// Non-null: a decode launch (configurations 18, 19, no SwiGLU) running the split schedule, or
  /// configuration 15 (split ranges across CTAs: decode batches of 65-256 rows) with
  /// set_decode_defer_split on, leaves its product
  /// as the f32 partials in `workspace` — no fold, no arrival counters, no reduction kernel — and
  /// describes them here; the op that reads the product folds them (PartialsIn). Otherwise *defer
  /// is left inactive and the outputs are written as usual.
  struct GemmPartials* defer = nullptr;
  /// The warpgroup decode GEMM's weight stages requested before its wait for this launch (≥ 0), or
  /// -1: set_decode_prewait_stages' depth (MatmulEngine::set_next_prewait sets it for the GEMM after
  /// an attention op). Same bits for any value.
  int prewait_stages = -1;
  /// Non-null: the product is q, k and v of one attention layer (three outputs, RopeArgs' q, k, v)
  /// and this RoPE op (norm_rope_store_kv / rope_store_kv, its cache and slots set) may run in the
  /// GEMM's epilogue: the warpgroup decode kernel at M ≤ 2 on clusters of 4 CTAs a head
  /// (gemm_wgmma_decode.cu, launch_gemm_wgmma_decode_rope). *rope_ran tells whether it did; if not,
  /// the GEMM ran as without it (its partials in *defer where set) and the caller runs the op.
  const RopeArgs* rope = nullptr;
  bool* rope_ran = nullptr;
};
/// Whether launch_gemm can fuse SwiGLU (GemmArgs::glu_inter) into an m × 2·inter × k GEMM here, and
/// it pays: the warpgroup GEMM enabled, inter % 64 == 0, k % 8 == 0, and 128 × 128 output tiles
/// filling at least half the SMs (the persistent kernel the unfused GEMM would run too).
bool gemm_swiglu_fits(int64_t m, int64_t inter, int64_t k, int num_sms);
/// Whether the warpgroup decode GEMM's SwiGLU with the fold schedule (GemmArgs::glu_schedule ≥ 1)
/// fits an m × 2·inter × k decode GEMM: the warpgroup GEMM enabled, m ≤ 64, inter % 32 == 0,
/// k % 8 == 0, and its column tiles (64 product columns each: 2·inter / 64) filling 90-100% of one
/// wave of resident CTAs — one tile a CTA, so fewer leave SMs idle and more take two turns.
bool decode_glu_fold_fits(int64_t m, int64_t inter, int64_t k, int num_sms);
/// The k-panel layout of a bf16 weight [n, k] (GemmArgs::w_panels): k / 64 panels, panel j holding
/// columns [64j, 64j + 64) of every row as a contiguous [n, 64] block at j · n · 128 bytes, row r's
/// 16-byte chunk c stored at chunk c ^ (r % 8) — the image a tensor copy with the 128-byte swizzle
/// leaves in shared memory. So the decode GEMM's stage (64 rows × 64 k) is 8 contiguous KB, and
/// CTAs walking k in step read neighbouring bytes, as a sweep of the matrix does (bench/RESULTS.md
/// run AP: +3.7% batch-1 decode against row-major 2-D tensor copies). Where n % 64 == 0 and
/// k % 64 == 0 (panels_fit).
bool panels_fit(int64_t n, int64_t k);
/// Writes row-major `w` [n, k] as k-panels to `panels` (n · k bf16, 16-byte aligned, not w) on `stream`.
void launch_to_panels(const void* w, void* panels, int64_t n, int64_t k, cudaStream_t stream);
/// The split-K ranges of the batch-invariant GEMM: a function of (n, k) and the device only.
struct GemmSplit {
  int splits = 1;
  int64_t ks = 0;  ///< elements of K per range (multiple of 128)
};
GemmSplit gemm_split(int64_t n, int64_t k, int num_sms);
/// The decode split policy's target of resident CTAs per SM (default 2). A tuning knob: it changes
/// S, hence the arithmetic of every invariant GEMM (consistently for every M, so batch invariance
/// holds); set once at start (RILL_GEMM_SPLIT_CTAS), before any GEMM runs.
void set_gemm_split_ctas_per_sm(int ctas);
/// Decode GEMM (tiled configurations, sm_90): weight tiles prefetched into L2 ahead of the
/// shared-memory stages (0: none). A hint: changes no bit (RILL_GEMM_L2_PREFETCH).
void set_gemm_l2_prefetch_tiles(int tiles);
/// The warpgroup (wgmma + tensor copy) GEMM, configurations 11-17 and 18-19 (gemm_wgmma.cu): whether
/// this build carries it for this GPU (sm_90 with sm_90a code; probed once, outside any graph
/// capture), and whether the automatic choice uses it (RILL_GEMM_WGMMA; on when supported).
bool gemm_wgmma_supported();
void set_gemm_wgmma(bool on);
/// Whether M > 16 GEMMs whose N is a multiple of 192 take the warpgroup kernel's 128 × 192 tiles
/// (configuration 16; off by default, RILL_GEMM_WIDE_TILE=1). Same bits either way.
void set_gemm_wide_tile(bool on);
/// Whether the persistent warpgroup GEMM (configuration 12 and the SwiGLU GEMM) runs in clusters of
/// two CTAs sharing each weight tile by multicast copies: -1 by the rule (from 1,024 rows, gemm.cu),
/// 0 never, 1 always (RILL_GEMM_MULTICAST). Same bits either way.
void set_gemm_multicast(int mode);
int gemm_multicast();
/// Whether the warpgroup GEMM takes its stream schedule (configuration 20; every CTA the same share of
/// the output tiles' split ranges): -1 by the rule (where one CTA a tile leaves SMs idle, gemm.cu),
/// 0 never, 1 wherever it can run (RILL_GEMM_STREAM). Same bits either way.
void set_gemm_stream(int mode);
int gemm_stream();
/// Whether configuration 15 (split ranges across CTAs: the invariant GEMM of 65-256 decode rows
/// whose 128 × 128 tiles fill less than half the SMs) also leaves its partials to the reader
/// (GemmArgs::defer) instead of running the reduction kernel (RILL_DECODE_DEFER_SPLIT; on by default:
/// batch 128 / 256 decode +0.3% / +0.9%, run U). Same bits either way.
void set_decode_defer_split(bool on);
bool decode_defer_split();
/// At most this many weight stages a CTA of the warpgroup decode GEMM requests before its wait
/// (-1: all; RILL_DECODE_PREWAIT). Same bits either way.
void set_decode_prewait_stages(int stages);
/// With stages > the pre-wait stages: a CTA of the warpgroup decode GEMM fills up to `stages` of its
/// stages before its wait, keeping at most the pre-wait stages' weight tiles in flight
/// (RILL_DECODE_PREWAIT_FILL; 0: off). Same bits either way.
void set_decode_prewait_fill(int stages);
/// The pre-wait depth of the decode GEMM that follows an attention op (the o projection, whose
/// pre-wait requests land during the attention section, where the weight stream is otherwise idle);
/// -1: the backend's rule (9 after a span combine kernel, else set_decode_prewait_stages' depth;
/// CudaKernels::next_gemm_prewait). RILL_DECODE_PREWAIT_AFTER_ATTENTION. Same bits either way.
void set_decode_prewait_after_attention(int stages);
int decode_prewait_after_attention();
/// The L2 promotion, in bytes (0, 64, 128, 256), of the warpgroup decode GEMM's weight tensor copies
/// (RILL_DECODE_L2_PROMOTION). Same bits either way.
void set_decode_l2_promotion(int bytes);
/// The decode GEMM's launches with at most two work items an SM: 0 (the CTAs of the other launches,
/// three an SM) or 9 / 12 stages a CTA of configuration 18, sized so that two fit an SM
/// (RILL_DECODE_FEW_ITEM_STAGES; default 9); configuration 19's 16- and 32-row CTAs take 9 stages
/// (two an SM) under either non-zero setting. Same bits.
void set_decode_few_item_stages(int stages);
/// When a CTA of the warpgroup decode GEMM lets the next kernel launch: right after its wait
/// (false: RILL_DECODE_TRIGGER=early) or once it has requested its last weight tile (true, the
/// backend's default).
void set_decode_late_trigger(bool late);
/// Resident CTAs an SM of the warpgroup decode GEMM (0: as many as fit, three; RILL_DECODE_CTAS).
/// Fewer leave shared memory for the next GEMM's CTAs to start their weight stream while this one
/// ends (with RILL_PDL_TRIGGER=early). Same bits either way: the split ranges do not change.
void set_decode_ctas_per_sm(int ctas);
/// Configuration 19's smallest x stage (16, 32 or 64 rows; RILL_DECODE_X_ROWS, default 16): it runs
/// the smallest of 16, 32 and 64 rows holding M and at least this. Same bits for any value.
void set_decode_min_x_rows(int rows);
bool gemm_wgmma_enabled();
/// The warpgroup attention kernel (attention_wgmma.cu) for the batch-invariant fold schedule at
/// head_dim 128 with 8-warp (128-row) blocks: supported as gemm_wgmma_supported; used when enabled
/// (RILL_ATTENTION_WGMMA; on when supported) over caches of power-of-two blocks of ≥ 8 slots.
/// Same bits as the mma.sync kernel.
bool attention_wgmma_supported();
void set_attention_wgmma(bool on);
bool attention_wgmma_enabled();
/// Launches of the warpgroup attention kernel so far (tests check that it ran).
uint64_t attention_wgmma_launches();
/// Invariant decode attention over at most 16 spans (the block-table width): the split attention
/// and its span combine as one kernel of thread-block clusters (sm_90+; RILL_ATTENTION_CLUSTER, on
/// by default). Same bits as the two kernels.
void set_attention_cluster(bool on);
bool attention_cluster_enabled();
/// How the cluster kernel's blocks hand each other their partials: pushed with st.async into the folding
/// block's shared memory, completing on its mbarrier (RILL_ATTENTION_CLUSTER_PUSH, on by default), or
/// read through distributed shared memory after a cluster barrier (off). Same bits.
void set_attention_cluster_push(bool on);
bool attention_cluster_push();
/// Launches of the cluster kernel so far (tests check that it ran).
uint64_t attention_cluster_launches();
/// Whether the calling thread's last launch_attention ended with the span combine as a kernel of its
/// own (the split schedule past the cluster kernel's reach: long contexts, or more rows than a wave of
/// clusters). The backend sizes the next GEMM's pre-wait burst by it (decode_prewait_after_attention).
bool attention_ended_with_combine();
/// Invariant decode attention at one m-tile (≤ 16 packed query rows) on the four-warp fold kernel
/// (attention_decode_fold_kernel; RILL_ATTENTION_DECODE_FOLD): 0 never (the one-warp fold kernel),
/// 1 where the fold schedule runs (more rows than a wave of split blocks), 2 also instead of a split
/// schedule whose blocks would each walk every span of their row. Same bits in every case.
void set_attention_decode_fold(int mode);
int attention_decode_fold();
/// Launches of the four-warp fold kernel so far (tests check that it ran).
uint64_t attention_decode_fold_launches();
/// The invariant split schedule's span combine takes chunks of 32 (one warp), 128 or 256 spans, a thread a
/// span: by default the smallest that holds the block table's spans; set_attention_combine_spans(32, 128 or
/// 256) forces one (RILL_ATTENTION_COMBINE_SPANS), 0 restores the rule. Same bits in every case.
void set_attention_combine_spans(int chunk);
int attention_combine_spans();
/// The chunk of the calling thread's last span combine (tests check which ran).
int attention_last_combine_spans();
/// The RoPE op run inside the invariant decode attention kernels (AttentionArgs::rope;
/// RILL_ATTENTION_ROPE=1; off by default: measured slower, bench/RESULTS.md run Q). Same bits as its
/// own kernel first.
void set_attention_rope(bool on);
/// The RoPE op in the q/k/v GEMM's epilogue (GemmArgs::rope; RILL_QKV_ROPE; same bits): -1 the rule
/// (before the split decode attention only: CudaKernels::qkv_rope_store_kv), 0 never, 1 wherever it fits.
void set_qkv_rope(int mode);
int qkv_rope_mode();
/// q/k/v GEMM launches that ran the RoPE op in their epilogue so far (tests check that it ran).
uint64_t qkv_rope_launches();
bool attention_rope_enabled();
/// Attention launches that ran the RoPE op inside so far (tests check that it ran).
uint64_t attention_rope_launches();
/// Batch-invariant tensor-core GEMM (gemm.cu): y[i, :] is bitwise the same for any m and any
/// position of row i in x.
void launch_gemm(const GemmArgs& a, cudaStream_t stream);
/// A decode GEMM's product left as split-K partials (GemmArgs::defer): workspace [splits, m, n]
/// f32, and the outputs its columns go to (as GemmArgs' outs / out_end; one output: out_end[0] = n).
struct GemmPartials {
  const float* ws = nullptr;  ///< null: nothing deferred
  const void* bias = nullptr;
  int64_t m = 0, n = 0;
  int splits = 0;
  void* outs[GemmArgs::kMaxOuts] = {};
  int64_t out_end[GemmArgs::kMaxOuts] = {};
  int num_outs = 0;
  bool active() const { return ws != nullptr; }
  /// Output s (columns [out_end[s - 1], out_end[s])) as a consumer's input.
  PartialsIn input(int s) const {
    PartialsIn p;
    p.ws = ws;
    p.bias = bias;
    p.n = n;
    p.plane = m * n;
    p.col0 = s > 0 ? out_end[s - 1] : 0;
    p.splits = splits;
    return p;
  }
};
/// Writes the outputs of a deferred product (the fold the GEMM skipped: same bits).
void launch_gemm_fold(const GemmPartials& p, cudaStream_t stream);

/// A batch-1 decode step's attention output projection and MLP as one persistent kernel
/// (decode_mlp.cu, sm_90a): delta = attn · oᵀ; residual += delta; h = RMSNorm(residual) · norm_w;
/// act = SwiGLU(h · gate_upᵀ); delta = act · downᵀ — the bits of launch_gemm (configuration 18),
/// launch_rms_norm with a residual and the SwiGLU kernel in turn, with one weight stream across
/// the three projections (see the kernel's header for why and how).
struct DecodeMlpArgs {
  const void* attn = nullptr;    ///< bf16 [k_attn]: the attention output (o's input)
  const void* o = nullptr;       ///< bf16 [hidden, k_attn]
  const void* gate_up = nullptr; ///< bf16 [2 · inter, hidden]: gate's rows, then up's
  const void* down = nullptr;    ///< bf16 [hidden, inter]
  const void* norm_w = nullptr;  ///< bf16 [hidden]
  void* residual = nullptr;      ///< bf16 [hidden], updated in place
  void* delta = nullptr;         ///< bf16 [hidden]: o's output inside the kernel, down's at the end
  void* act = nullptr;           ///< bf16 [inter]: the SwiGLU output (down's input)
  int64_t hidden = 0, k_attn = 0, inter = 0;
  float eps = 1e-6f;
  bool one_plus_weight = false, scale_in_fp32 = false;
  float* workspace = nullptr;  ///< split partials (f32)
  size_t workspace_bytes = 0;
  unsigned* counters = nullptr;  ///< zeroed; every launch leaves them zero again
  int64_t num_counters = 0;
  int num_sms = 132;
  /// A measurement aid (null normally): per CTA 128 slots — [0] the consumers' start (%globaltimer),
  /// [1 + 3i] the CTA's item i's index in the queue, [2 + 3i] when its consumers took it, [3 + 3i]
  /// when its multiplies ended, [96 + i] when the x side had its input (i < 30).
  unsigned long long* trace = nullptr;
};
/// Why launch_decode_mlp cannot run these arguments here (an empty string when it can): the
/// sm_90a kernel is not available, a shape is not a multiple of 64, the hidden size is outside
/// (1024, 8192], a split range or the row does not fit its shared-memory buffer, the workspace
/// or the counters are too small.
std::string decode_mlp_unsupported(const DecodeMlpArgs& a);
/// Launches it; throws with decode_mlp_unsupported's reason when it cannot.
void launch_decode_mlp(const DecodeMlpArgs& a, cudaStream_t stream);
/// Launches it when it can (true); else launches nothing (false) — the plan is made once.
bool try_launch_decode_mlp(const DecodeMlpArgs& a, cudaStream_t stream);

}  // namespace rill::cuda
