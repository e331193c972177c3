// model/qwen3_5.cpp — Qwen3.5 (dense) hybrid decoder, docs/models/qwen3_5.md:
//   x = embed(ids); per layer: h = norm1p(x); h = GDN(h) or GATED_ATTN(h); x += h;
//   h = norm1p(x); x += down(silu(gate)·up); logits = norm1p(x)·lm_headᵀ
// Full-attention layers: q_proj is split per head into query and gate rows at load, (1+w) q/k
// norms, partial rotary (text positions: the interleaved M-RoPE reduces to 1-D), o·sigmoid(gate).
// GDN layers: q/k/v projections (split from in_proj_qkv so each part stays contiguous), causal
// conv + SiLU with rolling state, l2-normalised q (× dk^-0.5) and k, the gated delta rule with f32
// state, gated RMSNorm (plain w) times silu(z), out_proj.
// Recurrent/conv state lives here, per slot: a row's slot is looked up by its key (explicit
// StepBatch::state_slots entry — the engine's StatePool slot id —, else its first block id); a row
// starting at position 0 resets it, any other row must start exactly where its state stopped.
// save_state/restore_state/copy_state move one slot's state (every GDN layer's conv and recurrent
// parts, f32, laid end to end) to and from snapshot memory with Kernels::copy.
#include "model/qwen3_5.h"
#include "model/step_inputs.h"

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "model/layers/rope.h"
#include "model/qwen3_5_moe.h"
#include "model/weights.h"

namespace rill {
namespace {

using json = nlohmann::json;

constexpr const char* kArchs[] = {"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
                                  "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"};

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) fail("{}: cannot open", p.string());
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: invalid JSON: {}", p.string(), e.what());
  }
}

struct Dims {
  int64_t H = 0, L = 0, Hq = 0, Hkv = 0, D = 0, I = 0, V = 0;
  int64_t Hk = 0, Hv = 0, dk = 0, dv = 0, K = 0;
  MoeSizes moe;  // E == 0: dense MLP
};

int64_t req_int(const json& j, const std::filesystem::path& path, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1)
    fail("{}: field '{}' is missing or not a positive integer", path.string(), key);
  return j[key].get<int64_t>();
}
int64_t opt_int(const json& j, const char* key, int64_t dflt) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : dflt;
}

std::vector<int32_t> ids_of(const json& j) {
  if (j.is_number_integer()) return {j.get<int32_t>()};
  if (j.is_array()) return j.get<std::vector<int32_t>>();
  return {};
}

// Fills ModelConfig (HF names) and the GDN sizes from config.json (text_config when present).
void parse_config(const std::filesystem::path& dir, ModelConfig& c, Dims& d) {
  const std::filesystem::path path = dir / "config.json";
  const json top = read_json(path);
  if (!top.contains("architectures") || !top["architectures"].is_array() || top["architectures"].empty())
    fail("{}: required field 'architectures' is missing", path.string());
  c.path = path;
  c.architecture = top["architectures"][0].get<std::string>();
  const bool nested = top.contains("text_config") && top["text_config"].is_object();
  const json& t = nested ? top["text_config"] : top;
  c.model_type = t.value("model_type", "");
  d.H = c.hidden_size = req_int(t, path, "hidden_size");
  d.moe.H = d.H;
  d.L = c.num_hidden_layers = req_int(t, path, "num_hidden_layers");
  d.Hq = c.num_attention_heads = req_int(t, path, "num_attention_heads");
  d.Hkv = c.num_key_value_heads = req_int(t, path, "num_key_value_heads");
  d.D = c.head_dim = opt_int(t, "head_dim", 256);
  if (c.architecture.find("Moe") != std::string::npos || t.contains("num_experts")) {
    d.moe = MoeSizes{d.H, req_int(t, path, "num_experts"), req_int(t, path, "num_experts_per_tok"),
                     req_int(t, path, "moe_intermediate_size"), req_int(t, path, "shared_expert_intermediate_size")};
    if (d.moe.k > d.moe.E) fail("{}: num_experts_per_tok {} exceeds num_experts {}", path.string(), d.moe.k, d.moe.E);
  } else {
    d.I = c.intermediate_size = req_int(t, path, "intermediate_size");
  }
  d.V = c.vocab_size = req_int(t, path, "vocab_size");
  d.Hk = opt_int(t, "linear_num_key_heads", 16);
  d.Hv = opt_int(t, "linear_num_value_heads", 32);
  d.dk = opt_int(t, "linear_key_head_dim", 128);
  d.dv = opt_int(t, "linear_value_head_dim", 128);
  d.K = opt_int(t, "linear_conv_kernel_dim", 4);
  if (d.Hq % d.Hkv != 0) fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", path.string(), d.Hq, d.Hkv);
  if (d.Hv % d.Hk != 0)
    fail("{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", path.string(), d.Hv, d.Hk);
  c.max_position_embeddings = opt_int(t, "max_position_embeddings", 32768);
  c.rms_norm_eps = t.value("rms_norm_eps", 1e-6);
  c.hidden_act = t.value("hidden_act", "silu");
  if (c.hidden_act != "silu") fail("{}: hidden_act '{}' is not supported (silu only)", path.string(), c.hidden_act);
  // Tied when either level says so (the VLM wrapper's top-level flag is what HF honours).
  c.tie_word_embeddings = t.value("tie_word_embeddings", false) || (nested && top.value("tie_word_embeddings", false));
  c.torch_dtype = t.value("dtype", top.value("dtype", top.value("torch_dtype", "")));
  // Rope: rope_parameters (5.x) or top-level text fields; theta 10000 and factor 0.25 when absent.
  const json rp = t.contains("rope_parameters") && t["rope_parameters"].is_object() ? t["rope_parameters"]
                  : t.contains("rope_scaling") && t["rope_scaling"].is_object() ? t["rope_scaling"]
                                                                                : json::object();
  c.rope.rope_type = rp.value("rope_type", rp.value("type", "default"));
  if (c.rope.rope_type != "default" && c.rope.rope_type != "mrope")
    fail("{}: rope_type '{}' is not supported for Qwen3.5", path.string(), c.rope.rope_type);
  c.rope.rope_type = "default";
  c.rope.rope_theta = rp.value("rope_theta", t.value("rope_theta", 10000.0));
  c.rope.partial_rotary_factor = rp.value("partial_rotary_factor", t.value("partial_rotary_factor", 0.25));
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    for (const json& x : t["layer_types"]) {
      std::string s = x.is_string() ? x.get<std::string>() : "";
      if (s == "attention") s = "full_attention";
      if (s == "mamba" || s == "conv") s = "linear_attention";
      if (s != "full_attention" && s != "linear_attention")
        fail("{}: layer_types entry '{}' is not linear_attention or full_attention", path.string(), x.dump());
      c.layer_types.push_back(s);
    }
    if (int64_t(c.layer_types.size()) != d.L)
      fail("{}: field 'layer_types' has {} entries for {} layers", path.string(), c.layer_types.size(), d.L);
  } else {
    const int64_t every = opt_int(t, "full_attention_interval", 4);
    for (int64_t i = 0; i < d.L; ++i) c.layer_types.push_back((i + 1) % every == 0 ? "full_attention" : "linear_attention");
  }
  if (t.contains("bos_token_id") && t["bos_token_id"].is_number_integer()) c.bos_token_id = t["bos_token_id"].get<int32_t>();
  auto add_eos = [&](const json& j) {
    if (!j.contains("eos_token_id")) return;
    for (int32_t id : ids_of(j["eos_token_id"]))
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) c.eos_token_ids.push_back(id);
  };
  add_eos(t);
  if (nested) add_eos(top);
  if (std::filesystem::exists(dir / "generation_config.json")) add_eos(read_json(dir / "generation_config.json"));
}

struct FullLayer {
  Tensor qgkv;              // [2·Hq·D + 2·Hkv·D, H]: query, gate, k, v rows (one matmul)
  Tensor o;                 // [H, Hq·D]
  Tensor q_norm, k_norm;    // [D], (1 + w)
  size_t kv_index = 0;
};

struct LinearLayer {
  Tensor w_in;                         // [2·Ck + 2·Cv + 2·Hv, H]: in_proj_qkv, z, a, b rows (one matmul)
  Tensor out;                          // out_proj
  Tensor conv_q, conv_k, conv_v;       // f32 [C_part, K]
  Tensor a_log, dt_bias, norm;         // f32 [Hv], [Hv], [dv]
  size_t state_index = 0;
};

struct Layer {
  bool full = false;
  Tensor input_norm, post_norm, gate_up, down;
  MoeBlock moe;  // MoE models
  FullLayer fa;
  LinearLayer la;
};

// Per-step temporaries of the layers, allocated once per forward from the arena.
struct Scratch {
  Tensor q, gate, k, v, attn;                           // full attention
  Tensor mq, mk, mv, cq, ck, cv, z, a, b, g, beta, o;  // GDN
};

// One GDN layer's state for `capacity` slots.
struct LayerState {
  Buffer conv_q, conv_k, conv_v, recurrent;
};

class Qwen35Model final : public Model {
 public:
  Qwen35Model(ModelConfig config, Dims dims, std::unique_ptr<WeightStore> store, Kernels& kernels,
              const LoadOptions& options)
      : config_(std::move(config)), d_(dims), store_(std::move(store)), kernels_(kernels) {
    load_weights(options);
    RopeFrequencies freqs = compute_rope_frequencies(config_.rope, d_.D);
    inv_freq_buffer_ = Buffer(kernels_.allocator(), freqs.inv_freq.size() * sizeof(float));
    rope_.inv_freq = inv_freq_buffer_.as(DType::f32, {int64_t(freqs.inv_freq.size())});
    kernels_.upload(freqs.inv_freq.data(), rope_.inv_freq);
    rope_.rotary_dim = freqs.rotary_dim;
    rope_.attention_factor = freqs.attention_factor;
    norm_.eps = float(config_.rms_norm_eps);
    norm_.one_plus_weight = true;
    norm_.scale_in_fp32 = true;
  }

  const ModelConfig& config() const override { return config_; }
  Kernels& kernels() override { return kernels_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  bool accepts_token_source() const override { return true; }  // upload_step_inputs copies them
  bool forward_waits_for_device() const override { return d_.moe.E > 0; }  // the MoE routes on the host
  KvSpec kv_spec() const override {
    return KvSpec{int32_t(num_full_), int32_t(d_.Hkv), int32_t(d_.D), kernels_.activation_dtype()};
  }
  Tensor forward(const StepBatch& batch, std::span<KvLayer> cache) override;

  size_t state_bytes_per_sequence() const override { return size_t(state_floats_per_slot()) * sizeof(float); }
  void reserve_state_slots(int32_t n) override;
  int64_t save_state(int32_t slot, Tensor& snapshot) override;
  void restore_state(int32_t slot, const Tensor& snapshot, int64_t position) override;
  void copy_state(int32_t from, int32_t to) override;
  void release_state(int32_t slot) override;

 private:
  // Floats of one GDN layer's state per slot: conv q, conv k, conv v, recurrent.
  std::array<int64_t, 4> state_parts() const {
    const int64_t Ck = d_.Hk * d_.dk, Cv = d_.Hv * d_.dv;
    return {(d_.K - 1) * Ck, (d_.K - 1) * Ck, (d_.K - 1) * Cv, d_.Hv * d_.dk * d_.dv};
  }
  int64_t state_floats_per_slot() const {
    int64_t n = 0;
    for (int64_t p : state_parts()) n += p;
    return n * int64_t(num_linear_);
  }
  /// Internal index of an explicit slot id (created when `create`, else it must exist).
  int32_t slot_index(int32_t slot, bool create);
  /// Copies one slot's state to (to_snapshot) or from a flat f32 snapshot.
  void move_state(int32_t index, const Tensor& snapshot, bool to_snapshot);
  void load_weights(const LoadOptions& options);
  Tensor to_f32(const Tensor& t, std::vector<int64_t> shape);
  Tensor fuse_q_gate_k_v(const Tensor& qg, const Tensor& k, const Tensor& v);
  void ensure_arena(int64_t tokens, int64_t logit_rows, size_t metadata_bytes);
  void ensure_slots(int64_t needed);
  StateBatch assign_slots(const StepBatch& batch);
  Tensor upload_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape);
  void linear_layer(const LinearLayer& L, const StateBatch& sb, const Scratch& s, const Tensor& h, Tensor& delta);

  ModelConfig config_;
  Dims d_;
  std::unique_ptr<WeightStore> store_;
  Kernels& kernels_;
  std::vector<Buffer> owned_;
  size_t weight_bytes_ = 0;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  size_t num_full_ = 0, num_linear_ = 0;
  Buffer inv_freq_buffer_;
  RopeTable rope_;
  NormParams norm_;
  Arena arena_;
  Arena moe_arena_;  // MoE temporaries, reset per layer
  int64_t arena_tokens_ = 0, arena_logit_rows_ = 0;
  size_t arena_meta_ = 0;
  // Recurrent state: per GDN layer, `capacity_` slots; key → slot.
  std::vector<LayerState> states_;
  int64_t capacity_ = 0;
  std::unordered_map<int64_t, int32_t> slot_of_key_;
  std::vector<int64_t> slot_pos_;  // tokens each slot's state has consumed; -1: none held
};

Tensor Qwen35Model::to_f32(const Tensor& t, std::vector<int64_t> shape) {
  Buffer buf(kernels_.allocator(), size_t(t.numel()) * sizeof(float));
  Tensor out = buf.as(DType::f32, std::span<const int64_t>(shape.data(), shape.size()));
  if (t.dtype() == DType::f32) {
    std::vector<float> host(size_t(t.numel()));
    kernels_.download(t, host.data());
    kernels_.upload(host.data(), out);
  } else {
    kernels_.convert(t.view(std::span<const int64_t>(shape.data(), shape.size())), out);
  }
  weight_bytes_ += buf.size();
  owned_.push_back(std::move(buf));
  return out;
}

// q_proj rows are per head [query (D) ‖ gate (D)]. Returns one weight of rows [every query
// row; every gate row; k rows; v rows], so one matmul (matmul_outputs) computes all four.
Tensor Qwen35Model::fuse_q_gate_k_v(const Tensor& qg, const Tensor& k, const Tensor& v) {
  const int64_t D = d_.D, H = d_.H, Hq = d_.Hq;
  RILL_CHECK(k.dtype() == qg.dtype() && v.dtype() == qg.dtype());
  const size_t row = size_t(H) * dtype_size(qg.dtype());
  std::vector<uint8_t> host(qg.nbytes()), fused(qg.nbytes() + k.nbytes() + v.nbytes());
  kernels_.download(qg, host.data());
  const size_t half = qg.nbytes() / 2;
  for (int64_t h = 0; h < Hq; ++h) {
    std::memcpy(fused.data() + size_t(h * D) * row, host.data() + size_t(h * 2 * D) * row, size_t(D) * row);
    std::memcpy(fused.data() + half + size_t(h * D) * row, host.data() + size_t(h * 2 * D + D) * row, size_t(D) * row);
  }
  kernels_.download(k, fused.data() + qg.nbytes());
  kernels_.download(v, fused.data() + qg.nbytes() + k.nbytes());
  Buffer buf(kernels_.allocator(), fused.size());
  Tensor out = buf.as(qg.dtype(), {int64_t(fused.size() / row), H});
  kernels_.upload(fused.data(), out);
  weight_bytes_ += buf.size();
  owned_.push_back(std::move(buf));
  return out;
}

void Qwen35Model::load_weights(const LoadOptions& options) {
  const Dims& d = d_;
  WeightLoader w(*store_, kernels_, options.weight_dtype);
  const std::string pre = store_->contains("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  embed_ = w.get(pre + "embed_tokens.weight", {d.V, d.H});
  final_norm_ = w.get(pre + "norm.weight", {d.H});
  if (store_->contains("lm_head.weight") && !config_.tie_word_embeddings) {
    lm_head_ = w.linear("lm_head.weight", {d.V, d.H});
  } else if (config_.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    fail("{}: lm_head.weight is missing and tie_word_embeddings is false", config_.path.string());
  }
  const int64_t Ck = d.Hk * d.dk, Cv = d.Hv * d.dv, C = 2 * Ck + Cv;
  layers_.resize(size_t(d.L));
  for (int64_t i = 0; i < d.L; ++i) {
    const std::string p = pre + "layers." + std::to_string(i) + ".";
    Layer& L = layers_[size_t(i)];
    L.full = config_.layer_types[size_t(i)] == "full_attention";
    L.input_norm = w.get(p + "input_layernorm.weight", {d.H});
    L.post_norm = w.get(p + "post_attention_layernorm.weight", {d.H});
    if (d.moe.E > 0) {
      L.moe.load(w, *store_, p, d.moe);
    } else {
      L.gate_up = w.linear_rows({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {{d.I, d.H}, {d.I, d.H}});
      L.down = w.linear(p + "mlp.down_proj.weight", {d.H, d.I});
    }
    if (L.full) {
      FullLayer& a = L.fa;
      {
        WeightLoader staging(*store_, kernels_, options.weight_dtype);  // freed after the fusion
        a.qgkv = fuse_q_gate_k_v(staging.get(p + "self_attn.q_proj.weight", {d.Hq * 2 * d.D, d.H}),
                                 staging.get(p + "self_attn.k_proj.weight", {d.Hkv * d.D, d.H}),
                                 staging.get(p + "self_attn.v_proj.weight", {d.Hkv * d.D, d.H}));
      }
      if (d.D % 8 == 0) kernels_.prepare_linear_weight(a.qgkv);  // (read whole: Kernels::prepare_linear_weight)
      a.o = w.linear(p + "self_attn.o_proj.weight", {d.H, d.Hq * d.D});
      a.q_norm = w.get(p + "self_attn.q_norm.weight", {d.D});
      a.k_norm = w.get(p + "self_attn.k_norm.weight", {d.D});
      a.kv_index = num_full_++;
    } else {
      LinearLayer& a = L.la;
      const std::string q = p + "linear_attn.";
      a.w_in = w.concat_rows({q + "in_proj_qkv.weight", q + "in_proj_z.weight", q + "in_proj_a.weight",
                              q + "in_proj_b.weight"},
                             {{C, d.H}, {Cv, d.H}, {d.Hv, d.H}, {d.Hv, d.H}});
      // Read whole by one matmul_outputs where its six outputs' widths are multiples of 8
      // (Kernels::prepare_linear_weight).
      if (Ck % 8 == 0 && Cv % 8 == 0 && d.Hv % 8 == 0) kernels_.prepare_linear_weight(a.w_in);
      a.out = w.linear(q + "out_proj.weight", {d.H, Cv});
      Tensor conv = to_f32(w.get(q + "conv1d.weight", {C, 1, d.K}), {C, d.K});
      a.conv_q = conv.slice(0, Ck);
      a.conv_k = conv.slice(Ck, 2 * Ck);
      a.conv_v = conv.slice(2 * Ck, C);
      a.a_log = to_f32(w.get(q + "A_log", {d.Hv}), {d.Hv});
      a.dt_bias = to_f32(w.get(q + "dt_bias", {d.Hv}), {d.Hv});
      a.norm = to_f32(w.get(q + "norm.weight", {d.dv}), {d.dv});
      a.state_index = num_linear_++;
    }
  }
  states_.resize(num_linear_);
  weight_bytes_ += w.device_bytes();
  for (Buffer& b : w.take_buffers()) owned_.push_back(std::move(b));
}

void Qwen35Model::ensure_arena(int64_t T, int64_t R, size_t meta) {
  if (T <= arena_tokens_ && R <= arena_logit_rows_ && meta <= arena_meta_) return;
  arena_meta_ = std::max(meta, arena_meta_ * 2);
  arena_tokens_ = std::max(T, arena_tokens_ * 2);
  arena_logit_rows_ = std::max(R, arena_logit_rows_ * 2);
  const Dims& d = d_;
  const size_t act = dtype_size(kernels_.activation_dtype());
  const int64_t Ck = d.Hk * d.dk, Cv = d.Hv * d.dv;
  const int64_t attn = 4 * d.Hq * d.D + 2 * d.Hkv * d.D;
  const int64_t lin = 4 * Ck + 5 * Cv + 4 * d.Hv;
  const int64_t per_token = 3 * d.H + attn + lin + 3 * d.I + 16;
  const size_t bytes = size_t(arena_tokens_ * per_token) * std::max<size_t>(act, 4) +
                       size_t(arena_logit_rows_ * (d.V + d.H)) * act + arena_meta_ + 256 * 1024;
  if (d.moe.E > 0) moe_arena_ = Arena(kernels_.allocator(), MoeBlock::arena_bytes(d.moe, arena_tokens_, act));
  arena_ = Arena(kernels_.allocator(), bytes);
}

Tensor Qwen35Model::upload_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  Tensor t = arena_.tensor(DType::i32, shape);
  kernels_.upload(v.data(), t);
  return t;
}

// Grows every layer's state to hold `needed` slots, keeping the existing slots' contents.
void Qwen35Model::ensure_slots(int64_t needed) {
  if (needed <= capacity_) return;
  const int64_t cap = std::max<int64_t>(needed, std::max<int64_t>(8, capacity_ * 2));
  const Dims& d = d_;
  const int64_t Ck = d.Hk * d.dk, Cv = d.Hv * d.dv;
  for (LayerState& s : states_) {
    auto grow = [&](Buffer& b, int64_t per_slot) {
      Buffer nb(kernels_.allocator(), size_t(cap * per_slot) * sizeof(float));
      std::vector<float> host(size_t(cap * per_slot), 0.f);
      if (capacity_ > 0) kernels_.download(b.as(DType::f32, {capacity_ * per_slot}), host.data());
      kernels_.upload(host.data(), nb.as(DType::f32, {cap * per_slot}));
      b = std::move(nb);
    };
    grow(s.conv_q, (d.K - 1) * Ck);
    grow(s.conv_k, (d.K - 1) * Ck);
    grow(s.conv_v, (d.K - 1) * Cv);
    grow(s.recurrent, d.Hv * d.dk * d.dv);
  }
  capacity_ = cap;
}

StateBatch Qwen35Model::assign_slots(const StepBatch& batch) {
  const int32_t rows = batch.num_rows();
  RILL_ENSURE(batch.state_slots.empty() || int32_t(batch.state_slots.size()) == rows,
              "[forward] state_slots has {} entries for {} rows", batch.state_slots.size(), rows);
  std::vector<int32_t> slots(static_cast<size_t>(rows)), has(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t q_len = batch.cu_seqlens[size_t(r + 1)] - batch.cu_seqlens[size_t(r)];
    const int32_t start = batch.context_lens[size_t(r)] - q_len;
    // Explicit slot ids and block ids live in separate key ranges.
    const int64_t key = batch.state_slots.empty()
                            ? int64_t(batch.block_tables[size_t(r) * size_t(batch.max_blocks_per_row)])
                            : (int64_t(1) << 40) + batch.state_slots[size_t(r)];
    auto it = slot_of_key_.find(key);
    if (it == slot_of_key_.end()) {
      it = slot_of_key_.emplace(key, int32_t(slot_of_key_.size())).first;
      slot_pos_.push_back(-1);
    }
    const int64_t held = slot_pos_[size_t(it->second)];
    if (start > 0 && held < 0)
      fail("[forward] row {} continues at position {} but no recurrent state is held for it", r, start);
    // The state must be exactly at the row's start: a row resumed from shared prefix blocks without
    // a restored snapshot, a replayed step or a wrong restore would otherwise read a state of other tokens.
    if (start > 0 && held != start)
      fail("[forward] row {} starts at position {} but its recurrent state is at position {}", r, start, held);
    for (int32_t q = 0; q < r; ++q)
      RILL_ENSURE(slots[size_t(q)] != it->second, "[forward] rows {} and {} share one recurrent-state slot", q, r);
    slots[size_t(r)] = it->second;
    has[size_t(r)] = start > 0 ? 1 : 0;
  }
  for (int32_t r = 0; r < rows; ++r) slot_pos_[size_t(slots[size_t(r)])] = batch.context_lens[size_t(r)];
  ensure_slots(int64_t(slot_of_key_.size()));
  StateBatch sb;
  sb.num_rows = rows;
  sb.cu_seqlens = upload_i32(batch.cu_seqlens, {rows + 1});
  sb.slots = upload_i32(slots, {rows});
  sb.has_state = upload_i32(has, {rows});
  return sb;
}

int32_t Qwen35Model::slot_index(int32_t slot, bool create) {
  RILL_ENSURE(slot >= 0, "[state] slot {} is negative", slot);
  const int64_t key = (int64_t(1) << 40) + slot;
  auto it = slot_of_key_.find(key);
  if (it == slot_of_key_.end()) {
    RILL_ENSURE(create, "[state] slot {} holds no state", slot);
    it = slot_of_key_.emplace(key, int32_t(slot_of_key_.size())).first;
    slot_pos_.push_back(-1);
    ensure_slots(int64_t(slot_of_key_.size()));
  }
  return it->second;
}

void Qwen35Model::reserve_state_slots(int32_t n) {
  if (num_linear_ == 0) return;
  for (int32_t s = 0; s < n; ++s) slot_index(s, true);
  ensure_slots(int64_t(slot_of_key_.size()));
}

void Qwen35Model::move_state(int32_t index, const Tensor& snapshot, bool to_snapshot) {
  const int64_t total = state_floats_per_slot();
  RILL_ENSURE(snapshot.dtype() == DType::f32 && snapshot.numel() == total && snapshot.is_contiguous(),
              "[state] snapshot must be contiguous f32 [{}], got {}", total, snapshot.describe());
  Tensor flat = snapshot.view({total});
  const std::array<int64_t, 4> parts = state_parts();
  int64_t off = 0;
  for (LayerState& st : states_) {
    Buffer* bufs[4] = {&st.conv_q, &st.conv_k, &st.conv_v, &st.recurrent};
    for (size_t p = 0; p < 4; ++p) {
      Tensor slot = bufs[p]->as(DType::f32, {capacity_, parts[p]}).slice(index, index + 1).view({parts[p]});
      Tensor snap = flat.slice(off, off + parts[p]);
      if (to_snapshot) {
        kernels_.copy(slot, snap);
      } else {
        kernels_.copy(snap, slot);
      }
      off += parts[p];
    }
  }
}

int64_t Qwen35Model::save_state(int32_t slot, Tensor& snapshot) {
  const int32_t index = slot_index(slot, false);
  const int64_t pos = slot_pos_[size_t(index)];
  RILL_ENSURE(pos >= 0, "[save_state] slot {} holds no state", slot);
  move_state(index, snapshot, true);
  return pos;
}

void Qwen35Model::restore_state(int32_t slot, const Tensor& snapshot, int64_t position) {
  RILL_ENSURE(position >= 0, "[restore_state] position {} is negative", position);
  const int32_t index = slot_index(slot, true);
  move_state(index, snapshot, false);
  slot_pos_[size_t(index)] = position;
}

void Qwen35Model::copy_state(int32_t from, int32_t to) {
  const int32_t src = slot_index(from, false), dst = slot_index(to, true);
  RILL_ENSURE(slot_pos_[size_t(src)] >= 0, "[copy_state] slot {} holds no state", from);
  const std::array<int64_t, 4> parts = state_parts();
  for (LayerState& st : states_) {
    Buffer* bufs[4] = {&st.conv_q, &st.conv_k, &st.conv_v, &st.recurrent};
    for (size_t p = 0; p < 4; ++p) {
      Tensor all = bufs[p]->as(DType::f32, {capacity_, parts[p]});
      Tensor d = all.slice(dst, dst + 1);
      kernels_.copy(all.slice(src, src + 1), d);
    }
  }
  slot_pos_[size_t(dst)] = slot_pos_[size_t(src)];
}

void Qwen35Model::release_state(int32_t slot) {
  auto it = slot_of_key_.find((int64_t(1) << 40) + slot);
  if (it != slot_of_key_.end()) slot_pos_[size_t(it->second)] = -1;
}

void Qwen35Model::linear_layer(const LinearLayer& L, const StateBatch& sb, const Scratch& s, const Tensor& h,
                               Tensor& delta) {
  const Dims& d = d_;
  const int64_t T = h.size(0), Ck = d.Hk * d.dk, Cv = d.Hv * d.dv, S = capacity_;
  Kernels& k = kernels_;
  LayerState& st = states_[L.state_index];
  Tensor mq = s.mq, mk = s.mk, mv = s.mv, cq = s.cq, ck = s.ck, cv = s.cv, z = s.z, a = s.a, b = s.b;
  Tensor g = s.g, beta = s.beta, o = s.o;
  Tensor* const in_out[] = {&mq, &mk, &mv, &z, &a, &b};
  k.matmul_outputs(h, L.w_in, nullptr, in_out);
  Tensor sq = st.conv_q.as(DType::f32, {S, d.K - 1, Ck}), sk = st.conv_k.as(DType::f32, {S, d.K - 1, Ck});
  Tensor sv = st.conv_v.as(DType::f32, {S, d.K - 1, Cv});
  k.causal_conv1d(mq, L.conv_q, sb, sq, cq, true);
  k.causal_conv1d(mk, L.conv_k, sb, sk, ck, true);
  k.causal_conv1d(mv, L.conv_v, sb, sv, cv, true);
  k.gdn_gates(a, b, L.a_log, L.dt_bias, g, beta);
  Tensor q_heads = cq.view({T * d.Hk, d.dk}), k_heads = ck.view({T * d.Hk, d.dk});
  k.l2_norm(q_heads, 1e-6f, 1.f / std::sqrt(float(d.dk)), q_heads);
  k.l2_norm(k_heads, 1e-6f, 1.f, k_heads);
  Tensor rec = st.recurrent.as(DType::f32, {S, d.Hv, d.dk, d.dv});
  Tensor o_flat = o.view({T * d.Hv, d.dv});
  k.gated_delta_rule(cq.view({T, d.Hk, d.dk}), ck.view({T, d.Hk, d.dk}), cv.view({T, d.Hv, d.dv}), g, beta, sb, rec,
                     o, DeltaRuleParams{});
  k.gated_rms_norm(o_flat, z.view({T * d.Hv, d.dv}), L.norm, float(config_.rms_norm_eps), o_flat);
  k.matmul(o.view({T, Cv}), L.out, nullptr, delta);
}

Tensor Qwen35Model::forward(const StepBatch& batch, std::span<KvLayer> cache) {
  const Dims& d = d_;
  const int64_t T = batch.num_tokens(), R = int64_t(batch.logit_indices.size());
  RILL_ENSURE(T > 0, "[forward] empty step");
  RILL_ENSURE(cache.size() == num_full_, "[forward] {} KV layers given for {} full-attention layers", cache.size(),
              num_full_);
  for (int32_t id : batch.tokens)
    RILL_ENSURE(id >= 0 && id < d.V, "[forward] token id {} is outside the vocabulary [0, {})", id, d.V);
  ensure_arena(T, R, step_metadata_bytes(batch));
  arena_.reset();
  const DType act = kernels_.activation_dtype();
  Kernels& k = kernels_;

  StepInputs inputs = upload_step_inputs(kernels_, arena_, batch);
  const AttentionBatch& ab = inputs.attention;
  const Tensor& ids = inputs.ids;
  const StateBatch sb = num_linear_ > 0 ? assign_slots(batch) : StateBatch{};

  Tensor residual = arena_.tensor(act, {T, d.H}), h = arena_.tensor(act, {T, d.H}), delta = arena_.tensor(act, {T, d.H});
  Tensor gate_up, mlp_in;
  if (d.moe.E == 0) {
    gate_up = arena_.tensor(act, {T, 2 * d.I});
    mlp_in = arena_.tensor(act, {T, d.I});
  }
  AttentionParams ap;
  ap.scale = 1.0f / std::sqrt(float(d.D));
  Scratch s;
  if (num_full_ > 0) {
    s.q = arena_.tensor(act, {T, d.Hq, d.D});
    s.gate = arena_.tensor(act, {T, d.Hq * d.D});
    s.k = arena_.tensor(act, {T, d.Hkv, d.D});
    s.v = arena_.tensor(act, {T, d.Hkv, d.D});
    s.attn = arena_.tensor(act, {T, d.Hq, d.D});
  }
  if (num_linear_ > 0) {
    const int64_t Ck = d.Hk * d.dk, Cv = d.Hv * d.dv;
    s.mq = arena_.tensor(act, {T, Ck});
    s.mk = arena_.tensor(act, {T, Ck});
    s.mv = arena_.tensor(act, {T, Cv});
    s.cq = arena_.tensor(act, {T, Ck});
    s.ck = arena_.tensor(act, {T, Ck});
    s.cv = arena_.tensor(act, {T, Cv});
    s.z = arena_.tensor(act, {T, Cv});
    s.a = arena_.tensor(act, {T, d.Hv});
    s.b = arena_.tensor(act, {T, d.Hv});
    s.g = arena_.tensor(DType::f32, {T, d.Hv});
    s.beta = arena_.tensor(DType::f32, {T, d.Hv});
    s.o = arena_.tensor(act, {T, d.Hv, d.dv});
  }

  k.embedding(ids, embed_, residual);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& L = layers_[i];
    if (i == 0) {
      k.rms_norm(residual, L.input_norm, norm_, h);
    } else {
      k.add_rms_norm(residual, delta, L.input_norm, norm_, h);
    }
    if (L.full) {
      const FullLayer& a = L.fa;
      Tensor q = s.q, gate = s.gate, kk = s.k, v = s.v, attn = s.attn;
      Tensor q2 = q.view({T, d.Hq * d.D}), k2 = kk.view({T, d.Hkv * d.D}), v2 = v.view({T, d.Hkv * d.D});
      Tensor* const qgkv_out[] = {&q2, &gate, &k2, &v2};
      k.matmul_outputs(h, a.qgkv, nullptr, qgkv_out);
      Tensor qh = q.view({T * d.Hq, d.D}), kh = kk.view({T * d.Hkv, d.D});
      k.rms_norm(qh, a.q_norm, norm_, qh);
      k.rms_norm(kh, a.k_norm, norm_, kh);
      k.rope_store_kv(q, kk, v, ab, rope_, cache[a.kv_index]);
      k.attention(q, cache[a.kv_index], ab, ap, attn);
      Tensor attn2 = attn.view({T, d.Hq * d.D});
      k.sigmoid_mul(attn2, gate, attn2);
      k.matmul(attn2, a.o, nullptr, delta);
    } else {
      linear_layer(L.la, sb, s, h, delta);
    }
    k.add_rms_norm(residual, delta, L.post_norm, norm_, h);
    if (d.moe.E > 0) {
      moe_arena_.reset();
      L.moe.forward(k, moe_arena_, h, delta);
    } else {
      k.matmul_swiglu(h, L.gate_up, nullptr, gate_up, mlp_in);
      k.matmul(mlp_in, L.down, nullptr, delta);
    }
  }
  k.add_rms_norm(residual, delta, final_norm_, norm_, h);
  Tensor logits = arena_.tensor(act, {R, d.V});
  if (R == 0) return logits;
  Tensor selected = arena_.tensor(act, {R, d.H});
  Tensor index = upload_i32(batch.logit_indices, {R});
  k.gather_rows(h, index, selected);
  k.matmul(selected, lm_head_, nullptr, logits);
  return logits;
}

}  // namespace

bool is_qwen3_5(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) return false;
  const json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    return false;
  const std::string a = j["architectures"][0].get<std::string>();
  for (const char* k : kArchs)
    if (a == k) return true;
  return false;
}

std::unique_ptr<Model> load_qwen3_5(const std::filesystem::path& dir, Kernels& kernels, const LoadOptions& options) {
  ModelConfig config;
  Dims dims;
  parse_config(dir, config, dims);
  auto store = std::make_unique<WeightStore>(dir);
  return std::make_unique<Qwen35Model>(std::move(config), dims, std::move(store), kernels, options);
}

}  // namespace rill
