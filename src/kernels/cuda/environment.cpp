// kernels/cuda/environment.cpp — CudaKernels' settings from the environment: the RILL_* variables
// that choose kernels and schedules (each a measurement knob whose default is the measured best;
// the reasons and figures are next to each), and their parsers, which refuse any value they do not
// know with an error naming the variable. Split from backend.cpp.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace rill::cuda {
namespace {

// RILL_GEMM_L2_PREFETCH (tiled decode configurations only): off. Batch-1 decode on the H200
// measured 160.8-161.1 tok/s with 2-16 tiles against 155.7-156.5 without, but the prefetch also
// slows the tiled kernels timed alone, which moved the automatic choice to the streaming kernels,
// and that choice made the difference. The streaming kernels (now batch 1-8's candidates,
// decode_candidates) do not prefetch; batch 9-16, which runs the tiled kernels, was measured
// without it.
constexpr int kDefaultL2PrefetchTiles = 0;

}  // namespace

int parse_attention_span_keys(const char* value) {
  if (!value) return 0;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v <= 0 || v % 64 != 0 || v > 8192)
    fail("RILL_ATTENTION_SPAN_KEYS: must be a multiple of 64 up to 8192, got '{}'", value);
  return int(v);
}

namespace {

// v as an int when it is exactly that int's decimal spelling ("7"; not "07", "+7", "7x" or "").
std::optional<int> exact_int(std::string_view v) {
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || std::to_string(x) != v) return std::nullopt;
  return x;
}

// An integer switch: null → fallback; lo..hi → that; anything else → an error naming the variable
// ("NAME: must be lo..hi<what>, got '...'").
int parse_int_in_range(std::string_view name, const char* value, int fallback, int lo, int hi,
                       std::string_view what) {
  if (!value) return fallback;
  const auto n = exact_int(value);
  if (n && *n >= lo && *n <= hi) return *n;
  fail("{}: must be {}..{}{}, got '{}'", name, lo, hi, what, value);
}

}  // namespace

int parse_decode_gemm_config(const char* value) {
  if (!value) return 0;
  const auto c = exact_int(value);
  if (c && (*c == 1 || (*c >= 5 && *c <= 10) || *c == 18 || *c == 19)) return *c;
  fail("RILL_DECODE_GEMM_CONFIG: must be 1, 5, 6, 7, 8, 9, 10, 18 or 19, got '{}'", value);
}

int parse_gemm_split_ctas(const char* value) { return parse_int_in_range("RILL_GEMM_SPLIT_CTAS", value, 2, 1, 8, ""); }

int parse_gemm_l2_prefetch(const char* value) {
  return parse_int_in_range("RILL_GEMM_L2_PREFETCH", value, kDefaultL2PrefetchTiles, 0, 32, " (weight tiles)");
}

int parse_attention_span_blocks(const char* value) {
  return parse_int_in_range("RILL_ATTENTION_SPAN_BLOCKS", value, 0, 0, 65535,
                            " (decode attention blocks a row and kv head; 0: one wave)");
}

int parse_attention_warps(const char* value) {
  if (!value) return 0;
  const auto w = exact_int(value);
  if (w && (*w == 1 || *w == 2 || *w == 4 || *w == 8)) return *w;
  fail("RILL_ATTENTION_WARPS: must be 1, 2, 4 or 8 (warps per attention block), got '{}'", value);
}

namespace {
// A warpgroup-kernel switch: null → -1 (on wherever supported), "0" → 0, "1" → 1 (required).
int parse_wgmma_switch(std::string_view name, const char* value) {
  if (!value) return -1;
  const auto on = exact_int(value);
  if (on && (*on == 0 || *on == 1)) return *on;
  fail("{}: must be 0 or 1, got '{}'", name, value);
}
}  // namespace

int parse_gemm_wgmma(const char* value) { return parse_wgmma_switch("RILL_GEMM_WGMMA", value); }
int parse_gemm_wide_tile(const char* value) { return parse_wgmma_switch("RILL_GEMM_WIDE_TILE", value) == 1; }
int parse_attention_wgmma(const char* value) { return parse_wgmma_switch("RILL_ATTENTION_WGMMA", value); }
int parse_gemm_swiglu(const char* value) { return parse_wgmma_switch("RILL_GEMM_SWIGLU", value) != 0; }
int parse_gemm_multicast(const char* value) { return parse_wgmma_switch("RILL_GEMM_MULTICAST", value); }
int parse_gemm_stream(const char* value) { return parse_wgmma_switch("RILL_GEMM_STREAM", value); }
int parse_decode_prewait(const char* value) {
  return parse_int_in_range("RILL_DECODE_PREWAIT", value, 5, 0, 8, " (weight stages requested before the wait)");
}
int parse_decode_prewait_after_attention(const char* value) {
  return parse_int_in_range("RILL_DECODE_PREWAIT_AFTER_ATTENTION", value, -1, 0, 12,
                            " (weight stages the decode GEMM after an attention requests before its wait)");
}
int parse_decode_prewait_fill(const char* value) {
  return parse_int_in_range("RILL_DECODE_PREWAIT_FILL", value, 0, 0, 12,
                            " (weight stages the decode GEMM fills before its wait, RILL_DECODE_PREWAIT in flight)");
}
int parse_decode_l2_promotion(const char* value) {
  if (!value) return 0;
  const auto bytes = exact_int(value);
  if (bytes && (*bytes == 0 || *bytes == 64 || *bytes == 128 || *bytes == 256)) return *bytes;
  fail("RILL_DECODE_L2_PROMOTION: must be 0, 64, 128 or 256 (bytes the decode GEMM's weight copies promote into "
       "L2), got '{}'",
       value);
}
int parse_decode_few_item_stages(const char* value) {
  if (!value) return 9;
  const auto stages = exact_int(value);
  if (stages && (*stages == 0 || *stages == 9 || *stages == 12)) return *stages;
  fail("RILL_DECODE_FEW_ITEM_STAGES: must be 0, 9 or 12 (stages a CTA of the decode GEMM's launches with few work "
       "items), got '{}'",
       value);
}
int parse_norm_cluster(const char* value) {
  if (!value) return -1;
  const auto blocks = exact_int(value);
  if (blocks && (*blocks == 0 || *blocks == 2 || *blocks == 4 || *blocks == 8 || *blocks == 16)) return *blocks;
  fail("RILL_NORM_CLUSTER: must be 0, 2, 4, 8 or 16 (blocks of a cluster that normalises one row of 1,025-8,192 "
       "at every batch; 0: one block a row; unset: clusters while they fit one wave of the SMs), got '{}'",
       value);
}
int parse_argmax_cluster(const char* value) {
  if (!value) return -1;
  const auto blocks = exact_int(value);
  if (blocks && (*blocks == 0 || *blocks == 2 || *blocks == 4 || *blocks == 8)) return *blocks;
  fail("RILL_ARGMAX_CLUSTER: must be 0, 2, 4 or 8 (blocks of a cluster that reads one row of logits at every "
       "batch; 0: one block a row; unset: clusters while they fit one wave of the SMs), got '{}'",
       value);
}
bool parse_weight_layout(const char* value) {
  if (!value || std::string_view(value) == "panels") return true;
  if (std::string_view(value) == "rows") return false;
  fail("RILL_WEIGHT_LAYOUT must be 'panels' (linear weights as k-panels for the warpgroup GEMM, the default) or "
       "'rows' (kept row-major), got '{}'",
       value);
}
int parse_decode_ctas(const char* value) {
  return parse_int_in_range("RILL_DECODE_CTAS", value, 0, 1, 3, " (resident CTAs an SM of the warpgroup decode GEMM)");
}
int parse_decode_x_rows(const char* value) {
  if (!value) return 16;
  const auto rows = exact_int(value);
  if (rows && (*rows == 16 || *rows == 32 || *rows == 64)) return *rows;
  fail("RILL_DECODE_X_ROWS: must be 16, 32 or 64 (configuration 19's smallest x stage in rows), got '{}'", value);
}
int parse_decode_defer_split(const char* value) {
  return parse_wgmma_switch("RILL_DECODE_DEFER_SPLIT", value) != 0;
}
int parse_decode_swiglu(const char* value) {
  return parse_int_in_range("RILL_DECODE_SWIGLU", value, 2, 0, 3,
                            " (0 the SwiGLU kernel; 1-3 in the decode GEMM: split, fold, fold launching at exit)");
}
std::string parse_leave_out(const char* value) {
  if (!value || std::string_view(value).empty() || std::string_view(value) == "none") return {};
  const std::string_view v(value);
  if (v.find_first_not_of("nra") != std::string_view::npos)
    fail("RILL_LEAVE_OUT: must be none or letters of nra (n add + RMSNorm, r RoPE, a attention), got '{}'", v);
  return std::string(v);
}
int parse_decode_mlp(const char* value) { return parse_wgmma_switch("RILL_DECODE_MLP", value) == 1; }
int parse_decode_defer(const char* value) { return parse_wgmma_switch("RILL_DECODE_DEFER", value) != 0; }
bool parse_attention_cluster(const char* value) { return parse_wgmma_switch("RILL_ATTENTION_CLUSTER", value) != 0; }
bool parse_attention_cluster_push(const char* value) {
  return parse_wgmma_switch("RILL_ATTENTION_CLUSTER_PUSH", value) != 0;
}
// The four-warp fold kernel wherever a decode attention block would walk every span of its row.
constexpr int kDefaultDecodeFold = 2;
int parse_attention_decode_fold(const char* value) {
  return parse_int_in_range("RILL_ATTENTION_DECODE_FOLD", value, kDefaultDecodeFold, 0, 2,
                            " (0: one-warp fold kernel, 1: four-warp fold kernel, 2: also for one-span-walk splits)");
}
// The span combine's chunk: 0 (the rule: the smallest of 32, 128, 256 holding the table's spans) or one forced.
int parse_attention_combine_spans(const char* value) {
  if (!value) return 0;
  const auto chunk = exact_int(value);
  if (chunk && (*chunk == 0 || *chunk == 32 || *chunk == 128 || *chunk == 256)) return *chunk;
  fail("RILL_ATTENTION_COMBINE_SPANS: must be 0 (by the block table), 32, 128 or 256 (the span combine's chunk), "
       "got '{}'",
       value);
}
bool parse_attention_rope(const char* value) { return parse_wgmma_switch("RILL_ATTENTION_ROPE", value) == 1; }
int parse_qkv_rope(const char* value) { return parse_wgmma_switch("RILL_QKV_ROPE", value); }
int parse_decode_trigger(const char* value) {
  if (!value) return -1;
  const std::string_view v(value);
  if (v == "early") return 0;
  if (v == "late") return 1;
  fail("RILL_DECODE_TRIGGER: must be early or late (when the decode GEMM lets the next kernel launch), got '{}'",
       value);
}

// The variables are read once, when the backend is made (before any kernel runs).
void CudaKernels::configure_from_environment() {
  const char* inv = std::getenv("RILL_BATCH_INVARIANT");
  set_batch_invariant(!(inv && std::string_view(inv) == "0"));
  attention_span_keys_ = parse_attention_span_keys(std::getenv("RILL_ATTENTION_SPAN_KEYS"));
  attention_span_blocks_ = parse_attention_span_blocks(std::getenv("RILL_ATTENTION_SPAN_BLOCKS"));
  set_attention_cluster(parse_attention_cluster(std::getenv("RILL_ATTENTION_CLUSTER")));
  set_attention_cluster_push(parse_attention_cluster_push(std::getenv("RILL_ATTENTION_CLUSTER_PUSH")));
  set_attention_decode_fold(parse_attention_decode_fold(std::getenv("RILL_ATTENTION_DECODE_FOLD")));
  set_attention_combine_spans(parse_attention_combine_spans(std::getenv("RILL_ATTENTION_COMBINE_SPANS")));
  // Off by default: batch-1 decode 211.5 / 191.9 tok/s at 512 / 8192 keys against 214.8 / 195.8 with the
  // RoPE kernel first, 211.0 / 192.0 against 223.2 / 202.4 on another machine (bench/RESULTS.md run Q:
  // without the small kernel between them, the attention's blocks are placed only as the q/k/v GEMM's
  // CTAs leave, and its K/V requests slow that GEMM's tail).
  set_attention_rope(parse_attention_rope(std::getenv("RILL_ATTENTION_ROPE")));
  // The RoPE op in the q/k/v GEMM's epilogue (batch 1-2 decode; same bits): by default only before the
  // split attention of long block tables (CudaKernels::qkv_rope_store_kv).
  set_qkv_rope(parse_qkv_rope(std::getenv("RILL_QKV_ROPE")));
  attention_warps_ = parse_attention_warps(std::getenv("RILL_ATTENTION_WARPS"));
  matmul_->set_bulk_copies(info_.cc_major >= 9);
  const int decode_config = parse_decode_gemm_config(std::getenv("RILL_DECODE_GEMM_CONFIG"));
  if (decode_config >= 9 && info_.cc_major < 9)
    fail("RILL_DECODE_GEMM_CONFIG={} needs the bulk copy engine of sm_90+; this GPU is sm_{}{}", decode_config,
         info_.cc_major, info_.cc_minor);
  matmul_->set_decode_config(decode_config);
  set_gemm_split_ctas_per_sm(parse_gemm_split_ctas(std::getenv("RILL_GEMM_SPLIT_CTAS")));
  set_gemm_l2_prefetch_tiles(info_.cc_major >= 9 ? parse_gemm_l2_prefetch(std::getenv("RILL_GEMM_L2_PREFETCH")) : 0);
  // The warpgroup GEMM (prefill, decode batches, and the decode configurations 18 / 19 for M ≤ 64):
  // on wherever this build and GPU run it.
  const int wgmma = parse_gemm_wgmma(std::getenv("RILL_GEMM_WGMMA"));
  if (wgmma == 1 && !gemm_wgmma_supported())
    fail("RILL_GEMM_WGMMA=1 needs an sm_90 GPU and a build for sm_90a (RILL_CUDA_ARCHITECTURES=90a); this GPU is "
         "sm_{}{}", info_.cc_major, info_.cc_minor);
  set_gemm_wgmma(wgmma != 0);
  set_gemm_wide_tile(parse_gemm_wide_tile(std::getenv("RILL_GEMM_WIDE_TILE")) != 0);
  set_gemm_multicast(parse_gemm_multicast(std::getenv("RILL_GEMM_MULTICAST")));
  set_gemm_stream(parse_gemm_stream(std::getenv("RILL_GEMM_STREAM")));
  // 5 by default: batch-1 decode at 8192 keys 202.7 against 200.3 tok/s with 4 and 201.6 with 6, at 512
  // 221.9 against 222.6 / 221.3, batches 16 / 64 +0.4%, 256 equal (bench/RESULTS.md run Q); all 8
  // measured 213.9 / 186.5 against 4's 217.1 / 188.5 at 512 / 8192 (run O): too many queued weight
  // requests ahead of the small kernels' loads.
  set_decode_prewait_stages(parse_decode_prewait(std::getenv("RILL_DECODE_PREWAIT")));
  set_decode_prewait_fill(parse_decode_prewait_fill(std::getenv("RILL_DECODE_PREWAIT_FILL")));
  set_decode_prewait_after_attention(
      parse_decode_prewait_after_attention(std::getenv("RILL_DECODE_PREWAIT_AFTER_ATTENTION")));
  // No L2 promotion by default: batch-1 decode 229.2 / 229.1 against 225.6 / 226.0 tok/s with 256 bytes
  // (the prefill GEMM's maps) at 512 keys, 206.6 / 206.7 against 205.9 / 205.7 at 8192 (bench/RESULTS.md
  // run Y); 128 bytes measured the same as none.
  set_decode_l2_promotion(parse_decode_l2_promotion(std::getenv("RILL_DECODE_L2_PROMOTION")));
  // 9 by default: batch-1 decode at 512 keys 230.81 / 230.83 tok/s against 227.23 / 226.77 with the 8-stage CTAs
  // (three an SM) and 229.43 / 229.57 with 12 stages (bench/RESULTS.md run Y5); batches 2-8 +3.2-5.3% and, with
  // configuration 19's launches sized alike, 16 / 32 +3.0 / +2.5% against 0 (run Z).
  set_decode_few_item_stages(parse_decode_few_item_stages(std::getenv("RILL_DECODE_FEW_ITEM_STAGES")));
  // Clusters of blocks a row while they fit one wave by default (bench/RESULTS.md run AH); none before sm_90.
  const int norm_blocks = parse_norm_cluster(std::getenv("RILL_NORM_CLUSTER"));
  if (norm_blocks > 0 && info_.cc_major < 9)
    fail("RILL_NORM_CLUSTER={} needs thread-block clusters (sm_90); this GPU is sm_{}{}", norm_blocks, info_.cc_major,
         info_.cc_minor);
  set_norm_cluster(info_.cc_major < 9 ? 0 : norm_blocks, info_.num_sms);
  const int argmax_blocks = parse_argmax_cluster(std::getenv("RILL_ARGMAX_CLUSTER"));
  if (argmax_blocks > 0 && info_.cc_major < 9)
    fail("RILL_ARGMAX_CLUSTER={} needs thread-block clusters (sm_90); this GPU is sm_{}{}", argmax_blocks,
         info_.cc_major, info_.cc_minor);
  set_argmax_cluster(info_.cc_major < 9 ? 0 : argmax_blocks, info_.num_sms);
  panel_weights_ = parse_weight_layout(std::getenv("RILL_WEIGHT_LAYOUT"));
  // As many as fit by default: 2 measured 197.7-198.1 against 203.0-203.8 tok/s (run M4).
  set_decode_ctas_per_sm(parse_decode_ctas(std::getenv("RILL_DECODE_CTAS")));
  // The smallest x stage holding M by default (three CTAs an SM up to 32 rows; bench/RESULTS.md run S).
  set_decode_min_x_rows(parse_decode_x_rows(std::getenv("RILL_DECODE_X_ROWS")));
  set_decode_defer_split(parse_decode_defer_split(std::getenv("RILL_DECODE_DEFER_SPLIT")) != 0);
  // Late by default: batch-1 decode 203.5-204.0 against 202.6-202.9 tok/s (bench/RESULTS.md run L).
  set_decode_late_trigger(parse_decode_trigger(std::getenv("RILL_DECODE_TRIGGER")) != 0);
  decode_swiglu_ = parse_decode_swiglu(std::getenv("RILL_DECODE_SWIGLU"));
  fuse_swiglu_ = parse_gemm_swiglu(std::getenv("RILL_GEMM_SWIGLU")) != 0;
  // Off by default: batch-1 decode 181.5 against 204.3 tok/s with the four ops (bench/RESULTS.md run N).
  fuse_decode_mlp_ = parse_decode_mlp(std::getenv("RILL_DECODE_MLP")) == 1;
  // On by default: the decode GEMMs leave their split-K fold to the op reading their product.
  defer_fold_ = parse_decode_defer(std::getenv("RILL_DECODE_DEFER")) != 0 ? 1 : 0;
  if (decode_config >= 18 && !gemm_wgmma_enabled())
    fail("RILL_DECODE_GEMM_CONFIG={} is the warpgroup decode GEMM: it needs an sm_90 GPU, a build for sm_90a "
         "(RILL_CUDA_ARCHITECTURES=90a) and RILL_GEMM_WGMMA not 0; this GPU is sm_{}{}",
         decode_config, info_.cc_major, info_.cc_minor);
  // The warpgroup attention kernel for the invariant fold schedule at head_dim 128 (prefill).
  const int attn_wgmma = parse_attention_wgmma(std::getenv("RILL_ATTENTION_WGMMA"));
  if (attn_wgmma == 1 && !attention_wgmma_supported())
    fail("RILL_ATTENTION_WGMMA=1 needs an sm_90 GPU and a build for sm_90a (RILL_CUDA_ARCHITECTURES=90a); this GPU "
         "is sm_{}{}", info_.cc_major, info_.cc_minor);
  set_attention_wgmma(attn_wgmma != 0);
  // Programmatic dependent launch needs sm_90 (griddepcontrol); older GPUs launch as before.
  set_pdl_enabled(parse_pdl_setting(std::getenv("RILL_PDL")) && info_.cc_major >= 9);
  // By default the add + RMSNorm kernel lets the next GEMM launch before its own wait and the other
  // latency-bound kernels after theirs: batch-1 decode +0.2% at 512 keys, +0.65% at 8,192 over "wait"
  // (bench/RESULTS.md run AG: the GEMM after a norm starts being placed and requesting weights during
  // the previous GEMM's tail, which has requested its last weight tile by then); every kernel before
  // its wait ("early") measured -1.3% at 512 keys (run AG; run M3: the o and down GEMMs' requests
  // then slow the kernels before them).
  constexpr int kDefaultTrigger = 4;  // parse_pdl_trigger("norm")
  const int trigger = parse_pdl_trigger(std::getenv("RILL_PDL_TRIGGER"));
  set_pdl_trigger(trigger < 0 ? kDefaultTrigger : trigger);
#if defined(RILL_PDL_TRACE)
  pdl_trace_start();
#endif
#if defined(RILL_LEAVE_OUT)
  leave_out_ = parse_leave_out(std::getenv("RILL_LEAVE_OUT"));
  if (!leave_out_.empty())
    logger().warn("RILL_LEAVE_OUT={}: captured decode steps skip these ops; every output is wrong (measurement only)",
                  leave_out_);
#endif
  if (const char* impl = std::getenv("RILL_INVARIANT_GEMM")) {
    const std::string_view v(impl);
    if (v == "cublaslt") matmul_->set_invariant_impl(MatmulEngine::InvariantImpl::cublaslt);
    else if (v == "ours") matmul_->set_invariant_impl(MatmulEngine::InvariantImpl::ours);
    else fail("RILL_INVARIANT_GEMM: must be ours or cublaslt, got '{}'", v);
  }
}

}  // namespace rill::cuda
