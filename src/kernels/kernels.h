// kernels/kernels.h — the op interface every backend implements (cpu/, cuda/).
// Model code is written once against Kernels&. All tensors passed to one backend live on that
// backend's device; shapes are checked up front and violations throw "[op] ..." rill::Errors.
// Activations are f32 on the CPU backend and bf16 on CUDA (activation_dtype()); weights may be
// f32 or bf16 (and quantized formats later). Kernels know nothing about requests or models.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/buffer.h"
#include "core/tensor.h"

namespace rill {

/// RMSNorm flavour. Llama/Qwen3: y = w * round_act(x̂) (two roundings in bf16);
/// Gemma/Qwen3.5: y = round_act(x̂ * w) or x̂ * (1 + w), one rounding. Identical in f32.
struct NormParams {
  float eps = 1e-6f;
  bool one_plus_weight = false;  ///< multiply by (1 + w) (Gemma, Qwen3.5)
  bool scale_in_fp32 = false;    ///< multiply by the weight before rounding to the activation dtype
};

/// Rotary embedding for one model: frequencies precomputed at load in f32.
struct RopeTable {
  Tensor inv_freq;               ///< f32 [rotary_dim / 2] on the kernel's device
  int rotary_dim = 0;            ///< ≤ head_dim, even; dims past it pass through (partial rotary)
  float attention_factor = 1.f;  ///< multiplies cos and sin (YaRN)
};

/// One attention layer's paged KV storage: k and v are [num_blocks, block_size, kv_heads, head_dim].
struct KvLayer {
  Tensor k;
  Tensor v;
};

/// Per-step layout shared by every attention layer: rows' new tokens are laid end to end.
/// Query token i of row r sits at absolute position context_lens[r] - q_len(r) + i and sees
/// keys at positions [max(0, pos - window + 1), pos] through the row's block table.
struct AttentionBatch {
  Tensor cu_seqlens_q;  ///< i32 [rows + 1], offsets of each row's new tokens
  Tensor context_lens;  ///< i32 [rows], KV length of the row after this step's tokens
  Tensor block_tables;  ///< i32 [rows, max_blocks_per_row]
  Tensor slot_mapping;  ///< i32 [tokens], cache slot (block * block_size + offset) of each new token
  Tensor positions;     ///< i32 [tokens], absolute position of each new token
  int32_t num_rows = 0;
  int32_t max_seqlen_q = 0;     ///< host-side hint: longest new-token run of a row
  int32_t max_context_len = 0;  ///< host-side hint: longest context of a row
};

struct AttentionParams {
  float scale = 1.f;        ///< multiplies q·k (HF: head_dim^-0.5 unless the family says otherwise)
  int32_t sliding_window = 0;  ///< 0: full causal attention
  float softcap = 0.f;      ///< 0: none; else scores = softcap * tanh(scores / softcap)
};


/// Per-row controls of Kernels::sample() (plain data, passed to the device as bytes). The
/// semantics, in order: penalties and bias (SamplingAdjust), temperature (0: greedy argmax),
/// top-k, top-p over the top-k survivors, min-p, then the Gumbel-max draw keyed by (seed, step).
/// engine/sampler.h documents them in full.
struct SamplingRowParams {
  int32_t logit_row = 0;           ///< row of `logits` this sample reads (rows may share one)
  int32_t top_k = 0;               ///< 0: off
  float temperature = 1.f;         ///< 0: greedy
  float top_p = 1.f;               ///< 1: off
  float min_p = 0.f;               ///< 0: off
  float repetition_penalty = 1.f;  ///< 1: off (applies to tokens in the prompt or the output)
  float presence_penalty = 0.f;    ///< output tokens only
  float frequency_penalty = 0.f;   ///< output tokens only, times their count
  uint64_t seed = 0;
  uint64_t step = 0;               ///< index of the token being drawn in its sequence
  int32_t adjust_begin = 0;        ///< this row's entries in SampleArgs::adjust: [begin, end)
  int32_t adjust_end = 0;
  int32_t num_top_logprobs = 0;    ///< alternatives to report, 0..kMaxTopLogprobs
  int32_t logprobs = 0;            ///< 1: report logprobs (else the logprobs row is left unset)
  /// >= 0: the row's sequence has drawn one more token than its adjust entries count, the id
  /// SampleArgs::pending_tokens[pending] (left on the device by the step before): it is adjusted as
  /// an output token — its entry with output_count + 1 and in_context 1, or, without an entry, as
  /// one {count 1, in_context 1, bias 0} — exactly as if the host had appended it.
  int32_t pending = -1;
  /// >= 0: no draw — the row scores this token instead (a prompt token's logprob): tokens[r] is
  /// score_token and, with `logprobs`, its raw logprob and the top-N alternatives are reported as
  /// for a draw. Penalties, bias, temperature and the cut-offs do not apply. Must lie in [0, V).
  int32_t score_token = -1;
};

/// A token whose logit a row changes before sampling; tokens unique within a row.
struct SamplingAdjust {
  int32_t token = 0;
  int32_t output_count = 0;  ///< occurrences in the output so far (presence/frequency penalties)
  int32_t in_context = 0;    ///< 1 when in the prompt or output (repetition penalty)
  float bias = 0.f;          ///< added to the logit after the penalties
};

constexpr int32_t kMaxTopLogprobs = 20;

/// Tensors of one Kernels::sample() call, all on the backend's device.
struct SampleArgs {
  Tensor logits;     ///< [L, V] activation dtype (or f32)
  Tensor params;     ///< u8 [R * sizeof(SamplingRowParams)]
  Tensor adjust;     ///< u8 [E * sizeof(SamplingAdjust)], E may be 0
  Tensor workspace;  ///< f32 [R, V] scratch
  Tensor tokens;     ///< out i32 [R]: the chosen token
  Tensor logprobs;   ///< out f32 [R, 1 + kMaxTopLogprobs]: chosen token's, then the alternatives'
  Tensor top_ids;    ///< out i32 [R, kMaxTopLogprobs]: alternatives, best first (lowest id on ties)
  Tensor pending_tokens;  ///< i32 [n], optional: the ids SamplingRowParams::pending indexes
};

/// Per-row recurrent state of a step (linear-attention layers): rows' new tokens laid end to end
/// as in AttentionBatch; each row reads and writes its own slot of the layer's state tensors.
struct StateBatch {
  Tensor cu_seqlens;  ///< i32 [rows + 1], offsets of each row's new tokens
  Tensor slots;       ///< i32 [rows], state slot of each row
  Tensor has_state;   ///< i32 [rows]; 0: the row starts from a zero state (its slot is overwritten)
  int32_t num_rows = 0;
};

/// How gated_delta_rule() evaluates the recurrence (the results agree to f32 rounding).
enum class DeltaRuleForm : uint8_t {
  automatic,  ///< recurrent for rows of ≤ 16 new tokens, chunked above
  recurrent,  ///< token by token (decode, speculative verification)
  chunked,    ///< chunks of `chunk_size` tokens as matrix products (prefill)
};

struct DeltaRuleParams {
  float scale = 1.f;  ///< multiplies q (Qwen3.5 passes 1 and pre-scales q in l2_norm)
  DeltaRuleForm form = DeltaRuleForm::automatic;
  int32_t chunk_size = 64;
};

/// A step's ops recorded once and replayed (a CUDA graph): every replay re-runs the same
/// launches on the same buffers, so the caller refreshes the inputs in place before each one.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  /// Enqueues the recorded ops (ordered after earlier ops, before later ones).
  virtual void replay() = 0;
};

/// A device → host copy that waits behind the queued work without making the host wait for it:
/// start() queues the copy, wait() blocks until its bytes have arrived. It lets a decode loop
/// queue step t + 1 (its tokens fed on the device from step t's picks) before reading step t's
/// ids, so the device never idles while the host reads, builds and launches.
class Readback {
 public:
  virtual ~Readback() = default;
  /// Queues a copy of `src` (contiguous, on this backend's device, at most capacity() bytes) after
  /// every op queued so far; src must not be written until wait() has returned (the copy may run
  /// on a queue of its own). The previous copy's bytes are gone once this is called.
  virtual void start(const Tensor& src) = 0;
  /// Blocks until the last start()'s copy has arrived and returns its bytes (host memory owned by
  /// this object, valid until the next start()). Throws when nothing was started.
  virtual const void* wait() = 0;
  virtual size_t capacity() const = 0;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual Device device() const = 0;
  /// The dtype this backend computes activations in (f32 on CPU, bf16 on CUDA).
  virtual DType activation_dtype() const = 0;
  /// Memory of this backend's device.
  virtual Allocator& allocator() = 0;
  /// Host → device copy of dst.nbytes() bytes (a plain memcpy on the CPU).
  virtual void upload(const void* host, Tensor dst) = 0;
  /// Device → host copy of src.nbytes() bytes; waits for the data.
  virtual void download(const Tensor& src, void* host) = 0;
  /// Waits for all queued work.
  virtual void synchronize() = 0;
  /// `w` (uploaded, [out, in]) is a linear layer's weight, read from now on only whole, as the weight
  /// operand of this backend's matmul ops (matmul, matmul_outputs, matmul_swiglu, o_proj_mlp,
  /// qkv_rope_store_kv), until it is freed or uploaded anew: the backend may store it in a layout of
  /// its own (CUDA: k-panels, MatmulEngine::store_as_panels). matmul_outputs reads it whole only where
  /// every output's width is a multiple of 8 (else one matmul a row range: not for such a weight).
  /// Default: nothing.
  virtual void prepare_linear_weight(const Tensor& w) { (void)w; }
  /// A reusable asynchronous device → host copy of up to `bytes` bytes (see Readback). The default
  /// copies synchronously in start() (right for the CPU, where ops run as they are called).
  virtual std::unique_ptr<Readback> make_readback(size_t bytes);

  /// y[M,N] = x[M,K] · w[N,K]ᵀ (+ bias[N]). Accumulates in f32.
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  /// One matmul whose output columns go to several tensors (fused projections, e.g. q/k/v from
  /// one [Nq + Nk + Nv, K] weight): ys[s] = x · w[rows of range s]ᵀ (+ bias of range s), the
  /// ranges consecutive with the widths of the outputs. The default runs one matmul per range
  /// over row slices of w; a backend may run it as one launch (CUDA: one batch-invariant GEMM).
  virtual void matmul_outputs(const Tensor& x, const Tensor& w, const Tensor* bias, std::span<Tensor* const> ys);
  /// y[M,D] = rmsnorm(x[M,D]) * w[D] per row. x and y may alias.
  virtual void rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) = 0;
  /// residual[M,D] += x; y = rmsnorm(residual) * w. The fused pre-norm of a decoder layer.
  virtual void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p,
                            Tensor& y) = 0;
  /// In place: q[T,Hq,D], k[T,Hkv,D] rotated by rotate-half pairing (j, j + rotary_dim/2) at positions[T].
  virtual void rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) = 0;
  /// Writes k[T,Hkv,D] and v[T,Hkv,D] into the paged cache at slot_mapping[T].
  virtual void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache) = 0;
  /// rope() then store_kv(); backends may fuse the two.
  virtual void rope_store_kv(Tensor& q, Tensor& k, const Tensor& v, const AttentionBatch& batch,
                             const RopeTable& table, KvLayer& cache) {
    rope(q, k, batch.positions, table);
    store_kv(k, v, batch.slot_mapping, cache);
  }
  /// rms_norm of every head of q[T,Hq,D] and k[T,Hkv,D] (weights q_norm, k_norm [D], shared by
  /// the heads: Qwen3's q/k norms), then rope_store_kv(). Backends may fuse the three; this
  /// default runs them in turn.
  virtual void norm_rope_store_kv(Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                                  const NormParams& np, const AttentionBatch& batch, const RopeTable& table,
                                  KvLayer& cache) {
    Tensor qh = q.view({q.size(0) * q.size(1), q.size(2)}), kh = k.view({k.size(0) * k.size(1), k.size(2)});
    rms_norm(qh, q_norm, np, qh);
    rms_norm(kh, k_norm, np, kh);
    rope_store_kv(q, k, v, batch, table, cache);
  }
  /// The attention's input projection and its RoPE op: matmul_outputs(h, qkv_w, qkv_bias) into q, k
  /// and v (as [T, heads·D] views), then norm_rope_store_kv (q_norm and k_norm given: Qwen3) or
  /// rope_store_kv. Backends may fuse them (same bits); this default runs them in turn.
  virtual void qkv_rope_store_kv(const Tensor& h, const Tensor& qkv_w, const Tensor* qkv_bias, Tensor& q, Tensor& k,
                                 Tensor& v, const Tensor* q_norm, const Tensor* k_norm, const NormParams& np,
                                 const AttentionBatch& batch, const RopeTable& table, KvLayer& cache) {
    Tensor q2 = q.view({q.size(0), q.size(1) * q.size(2)}), k2 = k.view({k.size(0), k.size(1) * k.size(2)});
    Tensor v2 = v.view({v.size(0), v.size(1) * v.size(2)});
    Tensor* const outs[] = {&q2, &k2, &v2};
    matmul_outputs(h, qkv_w, qkv_bias, outs);
    if (q_norm && k_norm) norm_rope_store_kv(q, k, v, *q_norm, *k_norm, np, batch, table, cache);
    else rope_store_kv(q, k, v, batch, table, cache);
  }
  /// out[T,Hq,D] = softmax(q·Kᵀ·scale + causal mask)·V over each row's paged KV (GQA: query
  /// head h reads kv head h / (Hq/Hkv)). The step's own K/V must already be in the cache.
  virtual void attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch,
                         const AttentionParams& p, Tensor& out) = 0;
  /// y[M,I] = silu(x[M, :I]) * x[M, I:] where x is [M, 2I] (gate and up projections side by side).
  virtual void swiglu(const Tensor& x, Tensor& y) = 0;
  /// y[M,I] = swiglu(matmul(x, w, bias)) for w [2I, K] (gate rows, then up rows); gate_up [M, 2I]
  /// is scratch for the product. Backends may fuse the two (same bits); this default runs them in turn.
  virtual void matmul_swiglu(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& gate_up, Tensor& y) {
    matmul(x, w, bias, gate_up);
    swiglu(gate_up, y);
  }
  /// The second half of a dense layer: delta = attn · oᵀ (+ o_bias); add_rms_norm(residual, delta,
  /// post_norm) into h; mlp_in = SwiGLU(h · gate_upᵀ (+ gate_up_bias)) (matmul_swiglu, gate_up its
  /// scratch); delta = mlp_in · downᵀ (+ down_bias). h and gate_up hold nothing afterwards. Backends
  /// may fuse the four (same bits: residual, mlp_in and delta); this default runs them in turn.
  virtual void o_proj_mlp(const Tensor& attn, const Tensor& o, const Tensor* o_bias, const Tensor& post_norm,
                          const NormParams& p, const Tensor& gate_up_w, const Tensor* gate_up_bias, const Tensor& down,
                          const Tensor* down_bias, Tensor& residual, Tensor& delta, Tensor& h, Tensor& gate_up,
                          Tensor& mlp_in) {
    matmul(attn, o, o_bias, delta);
    add_rms_norm(residual, delta, post_norm, p, h);
    matmul_swiglu(h, gate_up_w, gate_up_bias, gate_up, mlp_in);
    matmul(mlp_in, down, down_bias, delta);
  }
  /// out[T,H] = table[ids[T]] (table f32 or bf16, out in the activation dtype).
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  /// out = a + b (same shape; out may alias a or b).
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  /// out[R,H] = x[index[R], :].
  virtual void gather_rows(const Tensor& x, const Tensor& index, Tensor& out) = 0;
  /// out i32[R] = argmax over each row of x[R,V] (lowest index wins ties).
  virtual void argmax(const Tensor& x, Tensor& out) = 0;
  /// out[R,V] = softmax over each row of x (f32 out).
  virtual void softmax(const Tensor& x, Tensor& out) = 0;
  /// Elementwise dtype conversion (f32 ↔ bf16 ↔ f16), same shape.
  virtual void convert(const Tensor& x, Tensor& out) = 0;

  /// Draws one token per row of args.params from its logits row (SamplingRowParams semantics).
  /// Each row is computed from its own inputs only, so results do not depend on the other rows.
  /// Logprobs are log_softmax of the raw logits (before penalties, bias and temperature).
  virtual void sample(const SampleArgs& args) = 0;
  /// Copies KV block src_dst[i, 0] to block src_dst[i, 1] in both k and v (i32 [n, 2] on device).
  virtual void copy_kv_blocks(KvLayer& cache, const Tensor& src_dst) = 0;
  /// dst = src, byte for byte, on the device (both contiguous, same dtype and element count). The
  /// default stages through host memory; backends override it with a device-to-device copy.
  virtual void copy(const Tensor& src, Tensor& dst);
  /// Bytes of device memory free for new allocations (0: unknown; the caller picks a budget).
  virtual size_t free_memory() { return 0; }

  /// Batch invariance: a row's results do not depend on the other rows of a call. The CPU
  /// backend is always batch-invariant (this does nothing); CUDA is by default and can trade it
  /// for the autotuned cuBLASLt/matvec path's throughput.
  virtual void set_batch_invariant(bool on) { (void)on; }
  virtual bool batch_invariant() const { return true; }

  // ---- Step graphs (kernels/kernels.cpp holds the defaults: a backend without graphs throws).
  /// True when begin_capture()/end_capture() work on this backend (CUDA).
  virtual bool supports_graphs() const { return false; }
  /// From now on ops are recorded instead of run, until end_capture(). Nothing may synchronise
  /// with the host meanwhile (upload/download/synchronize throw), and no buffer may be allocated.
  virtual void begin_capture();
  /// Ends the recording begun by begin_capture() and returns it, ready to replay. When an op
  /// failed during the capture, ends it anyway and throws.
  virtual std::unique_ptr<StepGraph> end_capture();
  /// Ends a capture abandoned by an exception, discarding it; never throws.
  virtual void abort_capture() noexcept {}

  // ---- Linear-attention (Gated DeltaNet) ops. The defaults throw so that a backend without them
  // still builds; the CPU (kernels/cpu/gated_delta.cpp, conv1d.cpp, gdn_elementwise.cpp) and CUDA
  // (kernels/cuda/gated_delta.cu, conv1d.cu, gdn_elementwise.cu, gdn_backend.cpp) backends implement them.

  /// Depthwise causal conv over time per channel: y[t,c] = Σ_k w[c,k]·x[t-(K-1)+k, c], earlier
  /// inputs from the row's conv state (zeros when has_state is 0), then SiLU when `silu`.
  /// x, y [T,C]; w [C,K] f32; conv_state f32 [slots, K-1, C] ← the row's last K-1 inputs.
  virtual void causal_conv1d(const Tensor& x, const Tensor& w, const StateBatch& batch, Tensor& conv_state,
                             Tensor& y, bool silu);
  /// Gated delta rule per value head j (key head j / (Hv/Hk)): S ← e^g·S; S += k⊗β(v − Sᵀk);
  /// o = Sᵀ(scale·q). q, k [T,Hk,dk]; v, out [T,Hv,dv]; g, beta [T,Hv] f32; state f32
  /// [slots, Hv, dk, dv] read (when has_state) and written back per row.
  virtual void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const StateBatch& batch, Tensor& state, Tensor& out,
                                const DeltaRuleParams& p);
  /// y[M,D] = scale · x · rsqrt(Σ x² + eps) per row (sum, not mean). x and y may alias.
  virtual void l2_norm(const Tensor& x, float eps, float scale, Tensor& y);
  /// y[M,D] = rmsnorm(x)·w·silu(z) per row (plain w). x and y may alias.
  virtual void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y);
  /// g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b); a, b, g, beta [T,H]; A_log, dt_bias f32 [H].
  virtual void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias, Tensor& g,
                         Tensor& beta);
  /// out = x · sigmoid(gate), elementwise (out may alias x).
  virtual void sigmoid_mul(const Tensor& x, const Tensor& gate, Tensor& out);
};

/// The CPU backend (Highway SIMD, the global thread pool).
std::unique_ptr<Kernels> make_cpu_kernels();

/// The CUDA backend on the given device ordinal; throws rill::Error when none is usable.
/// Returns nullptr-free only in builds with CUDA (see cuda_available()).
std::unique_ptr<Kernels> make_cuda_kernels(int device_ordinal = 0);

/// True when this build has the CUDA backend and a usable GPU is present.
bool cuda_available();

}  // namespace rill
