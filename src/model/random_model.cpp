// model/random_model.cpp — see random_model.h. Weights are uniform with the variance of
// N(0, 1/fan_in) (so activations keep a sane scale through many layers), norms near 1, all
// rounded to bf16. A counter-based generator keyed by (seed, tensor index, element) lets
// tensors be filled in parallel and still be reproducible.
#include "model/random_model.h"

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/safetensors.h"

namespace rill {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Shape {
  const char* name;
  const char* architecture;
  int64_t hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, max_pos;
  double rope_theta, eps;
  bool tied, qk_norm;
  // Qwen3.5 hybrid (Gated DeltaNet) shapes only: linear-attention heads and dims, full attention
  // every `full_interval` layers (0: not hybrid).
  int64_t full_interval = 0, lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0;
};

constexpr Shape kShapes[] = {
    {"qwen3-tiny", "Qwen3ForCausalLM", 64, 2, 4, 2, 32, 160, 151936, 40960, 1e6, 1e-6, true, true},
    {"qwen3-0.6b", "Qwen3ForCausalLM", 1024, 28, 16, 8, 128, 3072, 151936, 40960, 1e6, 1e-6, true, true},
    {"qwen3-8b", "Qwen3ForCausalLM", 4096, 36, 32, 8, 128, 12288, 151936, 40960, 1e6, 1e-6, false, true},
    {"llama3-8b", "LlamaForCausalLM", 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000, 1e-5, false, false},
    // Qwen3.5-9B text model (docs/models/qwen3_5.md: the Qwen3_5TextConfig defaults): 24 GDN + 8 gated
    // attention layers, head_dim 256, Hk 16 / Hv 32 of 128, conv 4, untied head.
    {"qwen3.5-9b", "Qwen3_5ForCausalLM", 4096, 32, 16, 4, 256, 12288, 248320, 262144, 1e7, 1e-6, false, true, 4, 16,
     32, 128, 128, 4},
    // The same structure at test size (one full-attention layer in four).
    {"qwen3.5-tiny", "Qwen3_5ForCausalLM", 64, 4, 4, 2, 32, 160, 1000, 4096, 1e7, 1e-6, false, true, 4, 2, 4, 16, 16,
     4},
};

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  float center, half_width;  // uniform in [center - hw, center + hw]
  size_t bytes() const {
    size_t n = 2;
    for (int64_t d : shape) n *= size_t(d);
    return n;
  }
};

void fill(const Spec& s, uint64_t key, bf16_t* out) {
  const size_t n = s.bytes() / 2;
  ThreadPool::global().parallel_for(int64_t(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint64_t r = splitmix(key ^ splitmix(uint64_t(i)));
      float u = float(r >> 40) * (1.0f / float(1 << 24)) * 2.f - 1.f;  // [-1, 1)
      out[i] = f32_to_bf16(s.center + s.half_width * u);
    }
  });
}

json tokenizer_config(const fs::path& dir) {
  fs::path p = dir / "tokenizer_config.json";
  if (!fs::exists(p)) return json::object();
  std::ifstream in(p);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", p.string(), e.what());
  }
}

// The id of a token named in tokenizer_config.json (string or {"content": ...}), looked up in tokenizer.json.
std::optional<int32_t> special_id(const json& tok_json, const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  std::string text = cfg[key].is_object() ? cfg[key].value("content", "") : cfg[key].get<std::string>();
  if (tok_json.contains("added_tokens"))
    for (const json& t : tok_json["added_tokens"])
      if (t.value("content", "") == text) return int32_t(t["id"].get<int64_t>());
  if (tok_json.contains("model") && tok_json["model"].contains("vocab") && tok_json["model"]["vocab"].is_object() &&
      tok_json["model"]["vocab"].contains(text))
    return int32_t(tok_json["model"]["vocab"][text].get<int64_t>());
  return std::nullopt;
}

}  // namespace

std::vector<std::string> random_model_shapes() {
  std::vector<std::string> out;
  for (const Shape& s : kShapes) out.emplace_back(s.name);
  return out;
}

void make_random_model(const RandomModelOptions& o) {
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if (o.shape == s.name) shape = &s;
  if (!shape) {
    std::string list;
    for (auto& n : random_model_shapes()) list += (list.empty() ? "" : ", ") + n;
    fail("--shape: unknown model shape '{}' (known: {})", o.shape, list);
  }
  const Shape& S = *shape;
  fs::create_directories(o.out_dir);

  json config = {{"architectures", {S.architecture}},
                 {"model_type", std::string(S.architecture) == "LlamaForCausalLM" ? "llama" : "qwen3"},
                 {"hidden_size", S.hidden},
                 {"num_hidden_layers", S.layers},
                 {"num_attention_heads", S.heads},
                 {"num_key_value_heads", S.kv_heads},
                 {"head_dim", S.head_dim},
                 {"intermediate_size", S.intermediate},
                 {"vocab_size", S.vocab},
                 {"max_position_embeddings", S.max_pos},
                 {"rms_norm_eps", S.eps},
                 {"rope_theta", S.rope_theta},
                 {"hidden_act", "silu"},
                 {"tie_word_embeddings", S.tied},
                 {"attention_bias", false},
                 {"torch_dtype", "bfloat16"},
                 {"rill_random_model", {{"shape", S.name}, {"seed", o.seed}}}};
  const bool hybrid = S.full_interval > 0;
  if (hybrid) {
    // Qwen3_5ForCausalLM (text-only, weights under "model."), rope as transformers 5.x writes it.
    config["model_type"] = "qwen3_5_text";
    config.erase("rope_theta");
    config["rope_parameters"] = {{"rope_type", "default"},
                                 {"rope_theta", S.rope_theta},
                                 {"partial_rotary_factor", 0.25},
                                 {"mrope_section", {11, 11, 10}},
                                 {"mrope_interleaved", true}};
    json types = json::array();
    for (int64_t l = 0; l < S.layers; ++l)
      types.push_back((l + 1) % S.full_interval == 0 ? "full_attention" : "linear_attention");
    config["layer_types"] = types;
    config["full_attention_interval"] = S.full_interval;
    config["linear_num_key_heads"] = S.lin_k_heads;
    config["linear_num_value_heads"] = S.lin_v_heads;
    config["linear_key_head_dim"] = S.lin_k_dim;
    config["linear_value_head_dim"] = S.lin_v_dim;
    config["linear_conv_kernel_dim"] = S.conv_kernel;
  }
  std::vector<int32_t> eos;
  std::optional<int32_t> bos;
  if (o.tokenizer_dir) {
    fs::path tj = *o.tokenizer_dir / "tokenizer.json";
    if (!fs::exists(tj)) fail("--tokenizer: {} does not exist", tj.string());
    std::ifstream in(tj);
    json tok;
    try {
      tok = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", tj.string(), e.what());
    }
    json cfg = tokenizer_config(*o.tokenizer_dir);
    int64_t max_id = -1;
    if (tok.contains("model") && tok["model"].contains("vocab") && tok["model"]["vocab"].is_object())
      for (auto& [_, id] : tok["model"]["vocab"].items()) max_id = std::max<int64_t>(max_id, id.get<int64_t>());
    if (tok.contains("added_tokens"))
      for (const json& t : tok["added_tokens"]) max_id = std::max<int64_t>(max_id, t["id"].get<int64_t>());
    if (max_id >= S.vocab)
      fail("--tokenizer: {} has token id {} but shape {} has vocab_size {}", tj.string(), max_id, S.name, S.vocab);
    if (auto id = special_id(tok, cfg, "eos_token")) eos.push_back(*id);
    bos = special_id(tok, cfg, "bos_token");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"})
      if (fs::exists(*o.tokenizer_dir / f))
        fs::copy_file(*o.tokenizer_dir / f, o.out_dir / f, fs::copy_options::overwrite_existing);
  }
  if (!eos.empty()) config["eos_token_id"] = eos.size() == 1 ? json(eos[0]) : json(eos);
  if (bos) config["bos_token_id"] = *bos;
  std::ofstream(o.out_dir / "config.json") << config.dump(2) << "\n";
  json gen = {{"do_sample", false}};
  if (!eos.empty()) gen["eos_token_id"] = eos.size() == 1 ? json(eos[0]) : json(eos);
  std::ofstream(o.out_dir / "generation_config.json") << gen.dump(2) << "\n";

  // Tensor list in HF names.
  const int64_t H = S.hidden, D = S.head_dim, I = S.intermediate;
  const float norm_hw = 0.05f;
  auto linear = [](std::string n, int64_t out, int64_t in) {
    return Spec{std::move(n), {out, in}, 0.f, std::sqrt(3.f / float(in))};
  };
  std::vector<Spec> specs;
  specs.push_back(Spec{"model.embed_tokens.weight", {S.vocab, H}, 0.f, std::sqrt(3.f)});
  for (int64_t l = 0; hybrid && l < S.layers; ++l) {
    // Qwen3.5: (1 + w) norms stored near 0; gated q_proj (query and gate per head); GDN layers.
    std::string p = "model.layers." + std::to_string(l) + ".";
    specs.push_back(Spec{p + "input_layernorm.weight", {H}, 0.f, norm_hw});
    if ((l + 1) % S.full_interval == 0) {
      specs.push_back(linear(p + "self_attn.q_proj.weight", S.heads * 2 * D, H));
      specs.push_back(linear(p + "self_attn.k_proj.weight", S.kv_heads * D, H));
      specs.push_back(linear(p + "self_attn.v_proj.weight", S.kv_heads * D, H));
      specs.push_back(linear(p + "self_attn.o_proj.weight", H, S.heads * D));
      specs.push_back(Spec{p + "self_attn.q_norm.weight", {D}, 0.f, norm_hw});
      specs.push_back(Spec{p + "self_attn.k_norm.weight", {D}, 0.f, norm_hw});
    } else {
      const std::string q = p + "linear_attn.";
      const int64_t Ck = S.lin_k_heads * S.lin_k_dim, Cv = S.lin_v_heads * S.lin_v_dim;
      specs.push_back(linear(q + "in_proj_qkv.weight", 2 * Ck + Cv, H));
      specs.push_back(linear(q + "in_proj_z.weight", Cv, H));
      specs.push_back(linear(q + "in_proj_b.weight", S.lin_v_heads, H));
      specs.push_back(linear(q + "in_proj_a.weight", S.lin_v_heads, H));
      specs.push_back(Spec{q + "conv1d.weight", {2 * Ck + Cv, 1, S.conv_kernel}, 0.f,
                           std::sqrt(3.f / float(S.conv_kernel))});
      specs.push_back(Spec{q + "A_log", {S.lin_v_heads}, 0.f, 1.f});  // decay rates e^A_log in [0.37, 2.7]
      specs.push_back(Spec{q + "dt_bias", {S.lin_v_heads}, 1.f, 0.5f});
      specs.push_back(Spec{q + "norm.weight", {S.lin_v_dim}, 1.f, norm_hw});
      specs.push_back(linear(q + "out_proj.weight", H, Cv));
    }
    specs.push_back(Spec{p + "post_attention_layernorm.weight", {H}, 0.f, norm_hw});
    specs.push_back(linear(p + "mlp.gate_proj.weight", I, H));
    specs.push_back(linear(p + "mlp.up_proj.weight", I, H));
    specs.push_back(linear(p + "mlp.down_proj.weight", H, I));
  }
  for (int64_t l = 0; !hybrid && l < S.layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    specs.push_back(Spec{p + "input_layernorm.weight", {H}, 1.f, norm_hw});
    specs.push_back(linear(p + "self_attn.q_proj.weight", S.heads * D, H));
    specs.push_back(linear(p + "self_attn.k_proj.weight", S.kv_heads * D, H));
    specs.push_back(linear(p + "self_attn.v_proj.weight", S.kv_heads * D, H));
    specs.push_back(linear(p + "self_attn.o_proj.weight", H, S.heads * D));
    if (S.qk_norm) {
      specs.push_back(Spec{p + "self_attn.q_norm.weight", {D}, 1.f, norm_hw});
      specs.push_back(Spec{p + "self_attn.k_norm.weight", {D}, 1.f, norm_hw});
    }
    specs.push_back(Spec{p + "post_attention_layernorm.weight", {H}, 1.f, norm_hw});
    specs.push_back(linear(p + "mlp.gate_proj.weight", I, H));
    specs.push_back(linear(p + "mlp.up_proj.weight", I, H));
    specs.push_back(linear(p + "mlp.down_proj.weight", H, I));
  }
  specs.push_back(Spec{"model.norm.weight", {H}, hybrid ? 0.f : 1.f, norm_hw});
  if (!S.tied) specs.push_back(linear("lm_head.weight", S.vocab, H));

  // Shards of at most 4 GiB, named as transformers names them.
  const size_t kShardBytes = size_t(4) << 30;
  std::vector<std::vector<size_t>> shards(1);
  size_t in_shard = 0, total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (in_shard > 0 && in_shard + specs[i].bytes() > kShardBytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += specs[i].bytes();
    total += specs[i].bytes();
  }
  for (const char* stale : {"model.safetensors", "model.safetensors.index.json"}) fs::remove(o.out_dir / stale);
  json weight_map = json::object();
  size_t written = 0;
  std::vector<bf16_t> buffer;
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string file = shards.size() == 1 ? "model.safetensors"
                                          : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    size_t offset = 0;
    for (size_t i : shards[s]) {
      header[specs[i].name] = {{"dtype", "BF16"}, {"shape", specs[i].shape}, {"data_offsets", {offset, offset + specs[i].bytes()}}};
      offset += specs[i].bytes();
      weight_map[specs[i].name] = file;
    }
    std::string h = header.dump();
    while ((8 + h.size()) % 8) h.push_back(' ');
    std::ofstream out(o.out_dir / file, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot open for writing", (o.out_dir / file).string());
    uint64_t n = h.size();
    for (int b = 0; b < 8; ++b) out.put(char((n >> (8 * b)) & 0xff));
    out.write(h.data(), std::streamsize(h.size()));
    for (size_t i : shards[s]) {
      buffer.resize(specs[i].bytes() / 2);
      fill(specs[i], splitmix(o.seed * 1000003u + i), buffer.data());
      out.write(reinterpret_cast<const char*>(buffer.data()), std::streamsize(specs[i].bytes()));
      if (!out) fail("{}: write failed (disk full?)", (o.out_dir / file).string());
      written += specs[i].bytes();
      if (o.progress) o.progress(written, total);
    }
  }
  if (shards.size() > 1) {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream(o.out_dir / "model.safetensors.index.json") << index.dump(2) << "\n";
  }
}

}  // namespace rill
