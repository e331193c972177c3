// model/llama.cpp — Llama / Mistral / Qwen2 / Qwen3 dense decoder (models/llama-qwen3.md).
// The forward pass is a sequence of Kernels calls on arena tensors:
//   x = embed(ids); per layer: h = norm(x); q,k,v = h·W; (Qwen3) per-head q/k norm; rope;
//   append K/V; o = attention(q, cache); x += o·Wo; h = norm(x); x += down(silu(gate)·up)
// Family quirks are plain code here, keyed by the architecture name.
#include "model/llama.h"

#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "model/decode_graphs.h"
#include "model/layers/rope.h"
#include "model/step_inputs.h"
#include "model/weights.h"

namespace rill {
namespace {

enum class Family { llama, qwen2, qwen3 };

struct Layer {
  Tensor input_norm, post_norm;
  Tensor qkv, o;                  // [(Hq + 2·Hkv)·D, H]: q rows, k rows, v rows; [H, Hq·D]
  Tensor qkv_bias, o_bias;
  Tensor q_norm, k_norm;          // Qwen3: [D]
  Tensor gate_up, gate_up_bias;   // [2I, H]: gate rows then up rows
  Tensor down, down_bias;         // [H, I]
};

const Tensor* opt(const Tensor& t) { return t.defined() ? &t : nullptr; }

class LlamaModel final : public Model {
 public:
  LlamaModel(ModelConfig config, std::unique_ptr<WeightStore> store, Kernels& kernels, const LoadOptions& options)
      : config_(std::move(config)),
        store_(std::move(store)),
        kernels_(kernels),
        graphs_(kernels, [this](int64_t tokens) { return arena_bytes(tokens, 0); },
                options.cuda_graphs && cuda_graphs_enabled_by_env()) {
    const std::string& arch = config_.architecture;
    family_ = arch == "Qwen3ForCausalLM" ? Family::qwen3 : arch == "Qwen2ForCausalLM" ? Family::qwen2 : Family::llama;
    load_weights(options);
    RopeFrequencies freqs = compute_rope_frequencies(config_.rope, config_.head_dim);
    inv_freq_buffer_ = Buffer(kernels_.allocator(), freqs.inv_freq.size() * sizeof(float));
    rope_.inv_freq = inv_freq_buffer_.as(DType::f32, {int64_t(freqs.inv_freq.size())});
    kernels_.upload(freqs.inv_freq.data(), rope_.inv_freq);
    rope_.rotary_dim = freqs.rotary_dim;
    rope_.attention_factor = freqs.attention_factor;
    for (const std::string& t : config_.layer_types)
      if (t != "full_attention" && t != "sliding_attention")
        fail("{}: layer type '{}' is not supported by {}", config_.path.string(), t, arch);
    norm_.eps = float(config_.rms_norm_eps);
    // Llama/Qwen3 round x̂ to the activation dtype before multiplying by w (llama-qwen3.md).
    norm_.scale_in_fp32 = false;
  }

  const ModelConfig& config() const override { return config_; }
  Kernels& kernels() override { return kernels_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  bool accepts_token_source() const override { return true; }

  KvSpec kv_spec() const override {
    return KvSpec{int32_t(config_.num_hidden_layers), int32_t(config_.num_key_value_heads), int32_t(config_.head_dim),
                  kernels_.activation_dtype()};
  }

  Tensor forward(const StepBatch& batch, std::span<KvLayer> cache) override;

 private:
  void load_weights(const LoadOptions& options);
  void ensure_arena(const StepBatch& batch);
  size_t arena_bytes(int64_t tokens, int64_t logit_rows) const;
  /// The layers, the final norm and the LM head over uploaded inputs; temporaries from `arena`.
  Tensor body(const StepInputs& in, Arena& arena, bool all_rows_logits, std::span<KvLayer> cache);

  ModelConfig config_;
  std::unique_ptr<WeightStore> store_;
  Kernels& kernels_;
  Family family_ = Family::llama;
  std::vector<Buffer> owned_;
  size_t weight_bytes_ = 0;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  Buffer inv_freq_buffer_;
  RopeTable rope_;
  NormParams norm_;
  Arena arena_;
  int64_t arena_tokens_ = 0, arena_logit_rows_ = 0, arena_meta_ = 0;
  std::vector<int32_t> input_scratch_;
  DecodeGraphs graphs_;
};

void LlamaModel::load_weights(const LoadOptions& options) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t I = c.intermediate_size, V = c.vocab_size;
  WeightLoader w(*store_, kernels_, options.weight_dtype);
  const bool qkv_bias = family_ == Family::qwen2 || c.attention_bias;
  const bool o_bias = family_ != Family::qwen2 && c.attention_bias;
  const bool mlp_bias = family_ == Family::llama && c.mlp_bias;
  embed_ = w.get("model.embed_tokens.weight", {V, H});
  final_norm_ = w.get("model.norm.weight", {H});
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    lm_head_ = w.linear("lm_head.weight", {V, H});
  }
  layers_.resize(size_t(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (options.verbose && (i % 8 == 0 || i + 1 == c.num_hidden_layers))
      logger().debug("loading layer {}/{}", i + 1, c.num_hidden_layers);
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& L = layers_[size_t(i)];
    L.input_norm = w.get(p + "input_layernorm.weight", {H});
    L.post_norm = w.get(p + "post_attention_layernorm.weight", {H});
    // One weight for the three projections: one matmul launch (matmul_outputs) reads them.
    L.qkv = w.linear_rows({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
                          {{Hq * D, H}, {Hkv * D, H}, {Hkv * D, H}});
    L.o = w.linear(p + "self_attn.o_proj.weight", {H, Hq * D});
    if (qkv_bias)
      L.qkv_bias = w.concat_rows({p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"},
                                 {{Hq * D}, {Hkv * D}, {Hkv * D}});
    if (o_bias) L.o_bias = w.get(p + "self_attn.o_proj.bias", {H});
    if (family_ == Family::qwen3) {
      L.q_norm = w.get(p + "self_attn.q_norm.weight", {D});
      L.k_norm = w.get(p + "self_attn.k_norm.weight", {D});
    }
    L.gate_up = w.linear_rows({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {{I, H}, {I, H}});
    if (mlp_bias) L.gate_up_bias = w.concat_rows({p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"}, {{I}, {I}});
    L.down = w.linear(p + "mlp.down_proj.weight", {H, I});
    if (mlp_bias) L.down_bias = w.get(p + "mlp.down_proj.bias", {H});
  }
  weight_bytes_ = w.device_bytes();
  owned_ = w.take_buffers();
}

size_t LlamaModel::arena_bytes(int64_t tokens, int64_t logit_rows) const {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const size_t act = dtype_size(kernels_.activation_dtype());
  const int64_t per_token = 3 * H + 2 * Hq * D + 2 * Hkv * D + 3 * c.intermediate_size + 16;
  // Logits of every token at most (a decode graph computes them for all rows: logit_rows 0 → tokens).
  const int64_t rows = logit_rows > 0 ? logit_rows : tokens;
  // Every arena tensor is rounded up to 256 bytes: 24 tensors at most per step.
  return size_t(tokens * per_token) * act + size_t(rows * (c.vocab_size + H)) * act + 24 * 256;
}

void LlamaModel::ensure_arena(const StepBatch& batch) {
  const int64_t T = batch.num_tokens(), R = int64_t(batch.logit_indices.size());
  const int64_t meta = int64_t(step_metadata_bytes(batch));
  if (T <= arena_tokens_ && R <= arena_logit_rows_ && meta <= arena_meta_) return;
  // Grow geometrically so a run of growing steps reallocates O(log n) times, then never.
  arena_tokens_ = std::max(T, arena_tokens_ * 2);
  arena_logit_rows_ = std::max(R, arena_logit_rows_ * 2);
  arena_meta_ = std::max(meta, arena_meta_ * 2);
  arena_ = Arena();
  arena_ = Arena(kernels_.allocator(), arena_bytes(arena_tokens_, std::max<int64_t>(arena_logit_rows_, 1)) +
                                           size_t(arena_meta_));
}

Tensor LlamaModel::forward(const StepBatch& batch, std::span<KvLayer> cache) {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  RILL_ENSURE(T > 0, "[forward] empty step");
  RILL_ENSURE(int64_t(cache.size()) == c.num_hidden_layers, "[forward] {} KV layers given for {} layers",
              cache.size(), c.num_hidden_layers);
  for (int32_t id : batch.tokens)
    RILL_ENSURE(id >= 0 && id < c.vocab_size, "[forward] token id {} is outside the vocabulary [0, {})", id,
                c.vocab_size);
  if (graphs_.eligible(batch)) {
    // The graph records the cache layers' addresses: a step over other buffers needs its own.
    uint64_t buffers = 1469598103934665603ull;
    for (const KvLayer& l : cache)
      for (const void* ptr : {l.k.data(), l.v.data()}) buffers = (buffers ^ uint64_t(uintptr_t(ptr))) * 1099511628211ull;
    return graphs_.run(batch, buffers, [&](const StepInputs& in, Arena& arena, bool all) {
      return body(in, arena, all, cache);
    });
  }
  ensure_arena(batch);
  arena_.reset();
  const StepInputs inputs = upload_step_inputs(kernels_, arena_, batch, input_scratch_);
  return body(inputs, arena_, false, cache);
}

Tensor LlamaModel::body(const StepInputs& in, Arena& arena, bool all_rows_logits, std::span<KvLayer> cache) {
  const ModelConfig& c = config_;
  const int64_t T = in.ids.numel(), R = all_rows_logits ? T : in.logit_index.numel();
  const int64_t H = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t I = c.intermediate_size;
  const DType act = kernels_.activation_dtype();
  Kernels& k = kernels_;
  const AttentionBatch& ab = in.attention;

  Tensor residual = arena.tensor(act, {T, H});
  Tensor h = arena.tensor(act, {T, H});
  Tensor q = arena.tensor(act, {T, Hq, D});
  Tensor kk = arena.tensor(act, {T, Hkv, D});
  Tensor v = arena.tensor(act, {T, Hkv, D});
  Tensor attn = arena.tensor(act, {T, Hq, D});
  Tensor delta = arena.tensor(act, {T, H});
  Tensor gate_up = arena.tensor(act, {T, 2 * I});
  Tensor mlp_in = arena.tensor(act, {T, I});

  Tensor attn2 = attn.view({T, Hq * D});

  AttentionParams ap;
  ap.scale = 1.0f / std::sqrt(float(D));

  k.embedding(in.ids, embed_, residual);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& L = layers_[i];
    if (i == 0) {
      k.rms_norm(residual, L.input_norm, norm_, h);
    } else {
      k.add_rms_norm(residual, delta, L.input_norm, norm_, h);
    }
    const bool qk_norm = family_ == Family::qwen3;
    k.qkv_rope_store_kv(h, L.qkv, opt(L.qkv_bias), q, kk, v, qk_norm ? &L.q_norm : nullptr,
                        qk_norm ? &L.k_norm : nullptr, norm_, ab, rope_, cache[i]);
    ap.sliding_window = c.layer_types[i] == "sliding_attention" ? int32_t(c.sliding_window) : 0;
    k.attention(q, cache[i], ab, ap, attn);
    k.o_proj_mlp(attn2, L.o, opt(L.o_bias), L.post_norm, norm_, L.gate_up, opt(L.gate_up_bias), L.down,
                 opt(L.down_bias), residual, delta, h, gate_up, mlp_in);
  }
  k.add_rms_norm(residual, delta, final_norm_, norm_, h);
  Tensor logits = arena.tensor(act, {R, c.vocab_size});
  if (R == 0) return logits;
  if (all_rows_logits) {
    k.matmul(h, lm_head_, nullptr, logits);
    return logits;
  }
  Tensor selected = arena.tensor(act, {R, H});
  k.gather_rows(h, in.logit_index, selected);
  k.matmul(selected, lm_head_, nullptr, logits);
  return logits;
}

}  // namespace

std::unique_ptr<Model> make_llama_family(ModelConfig config, std::unique_ptr<WeightStore> store, Kernels& kernels,
                                         const LoadOptions& options) {
  return std::make_unique<LlamaModel>(std::move(config), std::move(store), kernels, options);
}

}  // namespace rill
