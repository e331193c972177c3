// kernels/cuda/cuda_kernels.h — CudaKernels: the CUDA implementation of Kernels (bf16
// activations, f32 accumulation) on one device and one non-blocking stream. Exposes the stream
// so the model can capture whole steps into CUDA graphs; every op only enqueues work (nothing
// synchronises except download/synchronize and the first, timed call of a new matmul shape,
// which is skipped while the stream is capturing). Workspaces are allocated once at creation,
// so no op allocates.
#pragma once

#include <memory>
#include <string>

#include "core/buffer.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "kernels/kernels.h"

namespace rill::cuda {

struct RopeArgs;

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(int device_ordinal);
  ~CudaKernels() override;

  Device device() const override { return Device::cuda; }
  DType activation_dtype() const override { return DType::bf16; }
  Allocator& allocator() override { return allocator_; }
  /// Stores w as k-panels where the warpgroup GEMM runs and RILL_WEIGHT_LAYOUT is not `rows`
  /// (MatmulEngine::store_as_panels).
  void prepare_linear_weight(const Tensor& w) override;
  void upload(const void* host, Tensor dst) override;
  void download(const Tensor& src, void* host) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void synchronize() override;
  std::unique_ptr<Readback> make_readback(size_t bytes) override;

  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override;
  void matmul_outputs(const Tensor& x, const Tensor& w, const Tensor* bias, std::span<Tensor* const> ys) override;
  void rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) override;
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) override;
  void rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) override;
  void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache) override;
  void rope_store_kv(Tensor& q, Tensor& k, const Tensor& v, const AttentionBatch& batch, const RopeTable& table,
                     KvLayer& cache) override;
  void norm_rope_store_kv(Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                          const NormParams& np, const AttentionBatch& batch, const RopeTable& table,
                          KvLayer& cache) override;
  /// At batch 1-2 of a decode step (head_dim 128, full rotary, the invariant GEMM's configuration 18)
  /// before the split attention of a long block table (RILL_QKV_ROPE unset; 1: wherever it fits, 0:
  /// never): one launch, the RoPE op in the GEMM's epilogue on clusters of 4 CTAs a head
  /// (GemmArgs::rope; same bits as the two ops). Elsewhere the two ops.
  void qkv_rope_store_kv(const Tensor& h, const Tensor& qkv_w, const Tensor* qkv_bias, Tensor& q, Tensor& k, Tensor& v,
                         const Tensor* q_norm, const Tensor* k_norm, const NormParams& np, const AttentionBatch& batch,
                         const RopeTable& table, KvLayer& cache) override;
  void attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, const AttentionParams& p,
                 Tensor& out) override;
  void swiglu(const Tensor& x, Tensor& y) override;
  /// One GEMM with SwiGLU in its epilogue where the matmul engine takes it (MatmulEngine::run_swiglu;
  /// at decode rows as RILL_DECODE_SWIGLU says), else the two ops.
  void matmul_swiglu(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& gate_up, Tensor& y) override;
  /// One row (a batch-1 decode step) in the batch-invariant mode with RILL_DECODE_MLP=1 (or
  /// set_decode_mlp): the fused block (launch_decode_mlp: one persistent kernel for the o projection,
  /// add + RMSNorm, gate/up + SwiGLU and down; same bits; measured slower, so off by default), else
  /// the four ops.
  void o_proj_mlp(const Tensor& attn, const Tensor& o, const Tensor* o_bias, const Tensor& post_norm,
                  const NormParams& p, const Tensor& gate_up_w, const Tensor* gate_up_bias, const Tensor& down,
                  const Tensor* down_bias, Tensor& residual, Tensor& delta, Tensor& h, Tensor& gate_up,
                  Tensor& mlp_in) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void gather_rows(const Tensor& x, const Tensor& index, Tensor& out) override;
  void argmax(const Tensor& x, Tensor& out) override;
  void softmax(const Tensor& x, Tensor& out) override;
  void convert(const Tensor& x, Tensor& out) override;
  /// Defined in sampling.cu.
  void sample(const SampleArgs& args) override;
  void copy_kv_blocks(KvLayer& cache, const Tensor& src_dst) override;
  /// Free device memory plus what this backend's allocator holds cached.
  size_t free_memory() override;
  // Gated DeltaNet ops (gdn_backend.cpp; kernels in gated_delta.cu, conv1d.cu, gdn_elementwise.cu).
  void causal_conv1d(const Tensor& x, const Tensor& w, const StateBatch& batch, Tensor& conv_state, Tensor& y,
                     bool silu) override;
  void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const StateBatch& batch, Tensor& state, Tensor& out, const DeltaRuleParams& p) override;
  void l2_norm(const Tensor& x, float eps, float scale, Tensor& y) override;
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) override;
  void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias, Tensor& g,
                 Tensor& beta) override;
  void sigmoid_mul(const Tensor& x, const Tensor& gate, Tensor& out) override;
  bool supports_graphs() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<StepGraph> end_capture() override;
  void abort_capture() noexcept override;

  /// The stream every op is enqueued on (capture it to build a graph of a step).
  cudaStream_t stream() const { return stream_.get(); }
  /// The stream with every queued op launched (a deferred fold settled), for work the host will
  /// wait on (readbacks); throws while a graph is being captured.
  cudaStream_t settled_stream();
  const DeviceInfo& info() const { return info_; }
  CachingAllocator& caching_allocator() { return allocator_; }
  MatmulEngine& matmul_engine() { return *matmul_; }
  /// Batch-invariant kernels: a row's results (matmul, attention) are bitwise the same whatever
  /// else is in the batch and however its prompt was chunked. On by default; the environment
  /// variable RILL_BATCH_INVARIANT=0 turns it off at creation (cuBLASLt / matvec autotuned
  /// matmuls, attention splits sized to the batch).
  void set_batch_invariant(bool on) override;
  bool batch_invariant() const override { return batch_invariant_; }
  /// Whether o_proj_mlp runs the fused decode MLP block at one row (RILL_DECODE_MLP=1; tests).
  void set_decode_mlp(bool on) { fuse_decode_mlp_ = on; }
  bool decode_mlp() const { return fuse_decode_mlp_; }
  /// Whether prepare_linear_weight stores weights as k-panels (RILL_WEIGHT_LAYOUT; tests).
  void set_panel_weights(bool on) { panel_weights_ = on; }
  /// Deferred GEMM folds (see deferral()): 0 off, 1 in captured graphs (the default; RILL_DECODE_DEFER=0
  /// turns it off), 2 on eager ops too (tests). Settles anything pending first.
  void set_decode_defer(int mode) {
    settle();
    defer_fold_ = mode;
  }
  int decode_defer() const { return defer_fold_; }
  /// The product a GEMM left for the next op to fold (inactive when none; tests).
  const GemmPartials& pending() const { return pending_; }
  /// Whether a RoPE op waits for its attention (pending_rope_; tests).
  bool rope_pending() const { return rope_pending_; }
  /// How matmul_swiglu runs decode rows (RILL_DECODE_SWIGLU, MatmulEngine::run_swiglu's decode_mode).
  int decode_swiglu() const { return decode_swiglu_; }
  /// Attention with a forced number of KV splits (tests and benchmarks; 0 = automatic).
  void set_attention_splits(int splits) { attention_splits_ = splits; }
  /// Batch-invariant attention's span in keys (a multiple of 64; 0 = the default for the head_dim).
  /// Part of the arithmetic, like RILL_ATTENTION_SPAN_KEYS: tests and benchmarks only.
  void set_attention_span_keys(int keys) { attention_span_keys_ = keys; }
  int attention_span_keys() const { return attention_span_keys_; }
  /// The decode split attention's blocks a (row, kv head), each walking every n-th span (0: the
  /// rule of split_schedule.h; RILL_ATTENTION_SPAN_BLOCKS). Same bits for any value.
  void set_attention_span_blocks(int n) { attention_span_blocks_ = n; }
  /// Attention with a forced kernel variant (tests, benchmarks; 0 = automatic): warps per block
  /// 1/2/4/8 and keys per tile 32/64 (head_dim 256: 32 only; 32 only with 1 or 2 warps below 256).
  void set_attention_variant(int warps, int keys_per_tile) {
    attention_warps_ = warps;
    attention_bn_ = keys_per_tile;
  }

 private:
  void configure_from_environment();  // RILL_* settings (environment.cpp)
  void rope_store_kv_launch(RopeArgs& a, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                            KvLayer& cache);
  // rope_store_kv_launch's checks and cache fields; the norm weights' (norm_rope_store_kv).
  void rope_store_kv_args(RopeArgs& a, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                          KvLayer& cache);
  void rope_norm_args(RopeArgs& a, const Tensor& q_norm, const Tensor& k_norm, const NormParams& np);
  // matmul_outputs with GemmArgs::rope (*rope_ran: whether the RoPE op ran in the GEMM).
  void matmul_outputs_rope(const Tensor& x, const Tensor& w, const Tensor* bias, std::span<Tensor* const> ys,
                           const RopeArgs* rope, bool* rope_ran);
  // Deferred folds (RILL_DECODE_DEFER, on by default, in captured step graphs). A batch-1..64 decode
  // GEMM of the invariant mode leaves its product as split-K partials (GemmArgs::defer; its end then
  // has no fence, arrival count or partials' round trip: ~0.3 ms a batch-1 8B step) and pending_
  // describes them. The next op either reads that product — add_rms_norm's x, swiglu's x, the q/k/v
  // of rope_store_kv / norm_rope_store_kv: their kernels fold on load (same bits) and store the
  // product's values — or settles it first: every other op (and end_capture, synchronize, download)
  // calls settle(), which runs the skipped fold. So no op ever reads a stale output. Only while a
  // graph is captured (the decode steps: all their work is ops of this class), unless forced
  // (set_decode_defer(2), tests): eager callers may also launch kernels on the stream themselves.
  GemmPartials* deferral();   // where a GEMM may defer (null: not now)
  void settle();
  PartialsIn take_pending(const Tensor& t);  // t's partials when t is the pending product, else settles
  void take_pending_qkv(RopeArgs& a, const Tensor& k, const Tensor& v);  // a.q, k, v: one pending GEMM's
  GemmPartials pending_;
  // The RoPE op deferred to the attention after it (rope_store_kv / norm_rope_store_kv on a pending
  // q/k/v GEMM, attention_rope_enabled(): RILL_ATTENTION_ROPE=1, off by default): attention() hands it
  // to the decode kernels, which run it inside their blocks (AttentionArgs::rope: one kernel and
  // hand-off fewer a layer) or launch it first; any other op settles it (launches it) first, like a
  // pending fold.
  RopeArgs pending_rope_;
  bool rope_pending_ = false;
  // An attention op ran since the last GEMM (and ended with its span combine as a kernel of its own):
  // the next GEMM, the o projection, takes the pre-wait depth of next_gemm_prewait.
  bool after_attention_ = false, after_combine_ = false;
  void next_gemm_prewait();
  int defer_fold_ = 1;  // 0 off, 1 in captured graphs, 2 always
  DeviceInfo info_;
  CachingAllocator allocator_;
  Stream stream_;
  CublasLtHandle lt_;
  Buffer lt_workspace_;
  Buffer splitk_workspace_;
  Buffer attention_workspace_;
  Buffer gemm_counters_;  // zeroed tile counters of the invariant GEMM (split schedule)
  std::unique_ptr<MatmulEngine> matmul_;
  bool batch_invariant_ = true;
  int attention_splits_ = 0;
  int attention_span_keys_ = 0;  // RILL_ATTENTION_SPAN_KEYS, 0: the kernel's default (64)
  int attention_span_blocks_ = 0;  // RILL_ATTENTION_SPAN_BLOCKS, 0: split_span_step
  int attention_warps_ = 0;
  int attention_bn_ = 0;
  bool fuse_swiglu_ = true;          // RILL_GEMM_SWIGLU
  int decode_swiglu_ = 2;            // RILL_DECODE_SWIGLU
  bool fuse_decode_mlp_ = false;     // RILL_DECODE_MLP
  bool panel_weights_ = true;        // RILL_WEIGHT_LAYOUT (prepare_linear_weight)
  bool panels_logged_ = false;
  // A measurement build's ops to leave out of captured steps (RILL_LEAVE_OUT; always empty otherwise).
  std::string leave_out_;
  // True when `op` ('n' add + RMSNorm, 'r' RoPE + K/V write, 'a' attention) is to be left out of
  // the step being captured: only in a build configured with RILL_LEAVE_OUT=ON (wrong outputs, the
  // same work otherwise; bench/RESULTS.md run W), never in another.
  bool left_out(char op) const;
};

/// RILL_ATTENTION_SPAN_KEYS: the invariant attention's span (KV positions folded as one partial;
/// shorter spans spread a decode step's context over more blocks, longer ones merge less often in
/// long prefills). Null → 0 (the kernel's default); not a multiple of 64 in (0, 8192] → an error
/// naming the variable.
int parse_attention_span_keys(const char* value);
/// RILL_ATTENTION_SPAN_BLOCKS: null → 0 (split_schedule.h's rule); 0..65535 → the decode split
/// attention's blocks a (row, kv head), each walking every n-th span (a measurement switch: any
/// value gives the same bits); anything else → an error naming the variable.
int parse_attention_span_blocks(const char* value);
/// RILL_ATTENTION_CLUSTER: null → true; "1" → true, "0" → false (the decode attention over ≤ 16
/// spans with its combine in one cluster kernel; same bits); anything else → an error naming it.
bool parse_attention_cluster(const char* value);
/// RILL_ATTENTION_CLUSTER_PUSH: null → true; "1" → true, "0" → false (the cluster kernel's partials pushed
/// into the folding blocks with st.async, or read after a cluster barrier; same bits); anything else → an
/// error naming the variable.
bool parse_attention_cluster_push(const char* value);
/// RILL_ATTENTION_DECODE_FOLD: null → the default (set_attention_decode_fold); 0, 1 or 2 → that
/// mode; anything else → an error naming the variable.
int parse_attention_decode_fold(const char* value);
/// RILL_ATTENTION_COMBINE_SPANS: null → 0 (the span combine's chunk by the block table); 0, 32, 128 or 256 →
/// that (set_attention_combine_spans); anything else → an error naming the variable.
int parse_attention_combine_spans(const char* value);
/// RILL_ATTENTION_ROPE: null or "0" → false; "1" → true (the RoPE op inside the decode attention; same
/// bits; measured slower, bench/RESULTS.md run Q); anything else → an error naming the variable.
bool parse_attention_rope(const char* value);
int parse_qkv_rope(const char* value);  // RILL_QKV_ROPE: unset → -1 (the rule), 0 never, 1 wherever it fits
/// RILL_DECODE_GEMM_CONFIG: null → 0 (timed per shape); 1, 5, 6, 7, 8, 9 or 10 → that
/// configuration for every decode GEMM; anything else → an error naming the variable.
int parse_decode_gemm_config(const char* value);
/// RILL_GEMM_SPLIT_CTAS: null → 2; 1..8 → the decode split policy's CTAs per SM (changes the
/// GEMM arithmetic, consistently for every M); anything else → an error naming the variable.
int parse_gemm_split_ctas(const char* value);
/// RILL_GEMM_L2_PREFETCH: null → the default; 0..32 → weight tiles the decode GEMM prefetches
/// into L2 ahead of its shared-memory stages; anything else → an error naming the variable.
int parse_gemm_l2_prefetch(const char* value);
/// RILL_GEMM_WGMMA: null → -1 (the warpgroup GEMM wherever supported); "0" → 0 (off); "1" → 1
/// (required: an error at start when unsupported); anything else → an error naming the variable.
int parse_gemm_wgmma(const char* value);
/// RILL_GEMM_WIDE_TILE: null or "0" → 0 (128 × 128 tiles, configuration 12: measured faster on the
/// H200); "1" → 1 (the warpgroup GEMM's 128 × 192 tiles where N is a multiple of 192, configuration
/// 16: a measurement knob, the bits do not change); anything else → an error naming the variable.
int parse_gemm_wide_tile(const char* value);
/// RILL_GEMM_SWIGLU: null or "1" → 1 (SwiGLU fused into the gate/up GEMM's epilogue where the
/// warpgroup GEMM runs it, prefill-sized M); "0" → 0 (the GEMM, then the SwiGLU kernel: a
/// measurement knob, the bits do not change); anything else → an error naming the variable.
int parse_gemm_swiglu(const char* value);
/// RILL_GEMM_MULTICAST: null → -1 (the persistent warpgroup GEMM in clusters of two CTAs sharing each
/// weight tile by multicast from 1,024 rows, where that measured faster); "0" → 0 (never); "1" → 1
/// (always: a measurement knob); the bits do not change; anything else → an error naming the variable.
int parse_gemm_multicast(const char* value);
/// RILL_GEMM_STREAM: null → -1 (the warpgroup GEMM's stream schedule where one CTA a tile would leave SMs
/// idle, gemm.cu); "0" → 0 (never); "1" → 1 (wherever it can run: a measurement knob); the bits do not
/// change; anything else → an error naming the variable.
int parse_gemm_stream(const char* value);
/// RILL_ATTENTION_WGMMA: the same for the warpgroup attention kernel (the invariant fold schedule
/// at head_dim 128, prefill; attention_wgmma.cu).
int parse_attention_wgmma(const char* value);
/// RILL_ATTENTION_WARPS: null → 0 (chosen by the query rows); 1, 2, 4, 8 → warps per attention
/// block for every call (a measurement knob: rows are independent, the bits do not change).
int parse_attention_warps(const char* value);
/// RILL_DECODE_PREWAIT: null → 5 (the warpgroup decode GEMM requests 5 of its 8 stages' weight tiles
/// before waiting for the previous kernel); 0..8 → at most that many (a measurement knob: the
/// requests queue ahead of the latency-bound kernels before the GEMM; the bits do not change);
/// anything else → an error naming the variable.
int parse_decode_prewait(const char* value);
/// RILL_DECODE_PREWAIT_FILL: null → 0 (off); 0..12 → the warpgroup decode GEMM fills that many of its
/// stages (at most all) before its wait, with at most RILL_DECODE_PREWAIT weight tiles in flight: the
/// next tile once an earlier one landed (a measurement knob; the bits do not change); anything else
/// → an error naming the variable.
int parse_decode_prewait_fill(const char* value);
/// RILL_DECODE_PREWAIT_AFTER_ATTENTION: null → -1 (the backend's rule: the decode GEMM after an
/// attention op requests 9 stages before its wait after a span combine kernel, else RILL_DECODE_PREWAIT's);
/// 0-12 → that many after every attention (at most the CTA's stages; the bits do not change);
/// anything else → an error naming the variable.
int parse_decode_prewait_after_attention(const char* value);
/// RILL_DECODE_L2_PROMOTION: null → 0 (none); 0, 64, 128 or 256 → the L2 promotion (bytes) of the
/// warpgroup decode GEMM's weight copies (a measurement knob; the bits do not change); anything
/// else → an error naming the variable.
int parse_decode_l2_promotion(const char* value);
/// RILL_NORM_CLUSTER: null → -1 (clusters of 8, 4 or 2 blocks a row while they fit one wave of the SMs,
/// one block beyond); 0 (one block a row), 2, 4, 8 or 16 → the add + RMSNorm kernel's rows of 1,025-8,192
/// on clusters of that many blocks at every batch (set_norm_cluster; the bits do not change); anything
/// else → an error naming the variable.
int parse_norm_cluster(const char* value);
/// RILL_ARGMAX_CLUSTER: null → -1 (clusters of 8, 4 or 2 blocks a row while they fit one wave of the SMs,
/// one block beyond); 0 (one block a row), 2, 4 or 8 → that many blocks a row at every batch
/// (set_argmax_cluster; the winner does not depend on it); anything else → an error naming the variable.
int parse_argmax_cluster(const char* value);
/// RILL_DECODE_FEW_ITEM_STAGES: null → 9; 0, 9 or 12 (set_decode_few_item_stages); else an error.
int parse_decode_few_item_stages(const char* value);
/// RILL_WEIGHT_LAYOUT: null or `panels` → true (linear weights stored as k-panels where the warpgroup
/// GEMM runs: prepare_linear_weight); `rows` → false (kept row-major; a measurement); else an error.
bool parse_weight_layout(const char* value);
/// RILL_DECODE_CTAS: null → 0 (as many CTAs an SM as fit); 1..3 → at most that many resident CTAs an
/// SM of the warpgroup decode GEMM (a measurement knob; the bits do not change); anything else → an
/// error naming the variable.
int parse_decode_ctas(const char* value);
/// RILL_DECODE_X_ROWS: null → 16; 16, 32, 64 → configuration 19's smallest x stage in rows (a
/// measurement knob: 64 runs the 64-row stage at every M; the bits do not change); anything else
/// → an error naming the variable.
int parse_decode_x_rows(const char* value);
/// RILL_DECODE_DEFER_SPLIT: null or "1" → 1 (configuration 15 leaves its partials to the op reading
/// the product in captured decode steps, set_decode_defer_split); "0" → 0 (the reduction kernel);
/// anything else → an error naming the variable.
int parse_decode_defer_split(const char* value);
/// RILL_DECODE_TRIGGER: null → -1 (the default placement, late; see backend.cpp); "early" → 0 (the
/// warpgroup decode GEMM lets the next kernel launch right after its wait); "late" → 1 (once a CTA
/// has requested its last weight tile); anything else → an error naming the variable.
int parse_decode_trigger(const char* value);
/// RILL_DECODE_SWIGLU: null → 2; "0" → 0 (decode rows run the gate/up GEMM, then the SwiGLU kernel);
/// "1" → the warpgroup decode GEMM's SwiGLU with its split schedule (M ≤ 8); "2" / "3" → with its
/// fold schedule where one column tile a CTA fills a wave (M ≤ 32), "3" launching the next kernel at
/// the grid's completion (MatmulEngine::run_swiglu; the bits do not change); anything else → an
/// error naming the variable.
int parse_decode_swiglu(const char* value);
/// RILL_LEAVE_OUT (read only by a build configured with -DRILL_LEAVE_OUT=ON, for measurement): null,
/// "" or "none" → "" (nothing); else letters of "nra" — the add + RMSNorm ('n'), RoPE + K/V write
/// ('r') and attention ('a') ops whose launches captured decode steps skip (wrong outputs: what a
/// step costs without them); anything else → an error naming the variable.
std::string parse_leave_out(const char* value);
/// RILL_DECODE_MLP: null or "0" → 0 (the four ops: measured faster in the batch-1 decode graph);
/// "1" → 1 (a batch-1 decode step's o projection and MLP run as one persistent kernel,
/// CudaKernels::o_proj_mlp: a measurement knob, the bits do not change); anything else → an error
/// naming the variable.
int parse_decode_mlp(const char* value);
/// RILL_DECODE_DEFER: null or "1" → 1 (the invariant decode GEMMs leave their split-K fold to the op
/// reading their product, CudaKernels::settle); "0" → 0 (each GEMM folds its own partials: a
/// measurement knob, the bits do not change); anything else → an error naming the variable.
int parse_decode_defer(const char* value);

}  // namespace rill::cuda
