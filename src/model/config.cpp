// model/config.cpp — config.json parsing with field-named errors.
#include "model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rill {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open (missing file?)", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

class Fields {
 public:
  Fields(const json& j, const fs::path& path) : j_(j), path_(path) {}

  int64_t required_int(const char* key, int64_t min_value = 1) const {
    if (!j_.contains(key) || j_[key].is_null()) fail("{}: required field '{}' is missing", path_.string(), key);
    return checked_int(key, min_value);
  }
  int64_t optional_int(const char* key, int64_t fallback, int64_t min_value = 0) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    return checked_int(key, min_value);
  }
  double optional_double(const char* key, double fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_number()) fail("{}: field '{}' must be a number, got {}", path_.string(), key, j_[key].dump());
    return j_[key].get<double>();
  }
  bool optional_bool(const char* key, bool fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_boolean()) fail("{}: field '{}' must be true or false, got {}", path_.string(), key, j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string optional_string(const char* key, const std::string& fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_string()) fail("{}: field '{}' must be a string, got {}", path_.string(), key, j_[key].dump());
    return j_[key].get<std::string>();
  }

 private:
  int64_t checked_int(const char* key, int64_t min_value) const {
    const json& v = j_[key];
    if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, got {}", path_.string(), key, v.dump());
    int64_t x = v.get<int64_t>();
    if (x < min_value) fail("{}: field '{}' must be ≥ {}, got {}", path_.string(), key, min_value, x);
    return x;
  }
  const json& j_;
  const fs::path& path_;
};

void parse_token_ids(const json& v, const fs::path& path, const char* key, std::vector<int32_t>& out) {
  auto add = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      fail("{}: field '{}' must be a token id or a list of token ids, got {}", path.string(), key, v.dump());
    int32_t id = int32_t(x.get<int64_t>());
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  if (v.is_null()) return;
  if (v.is_array()) {
    for (const json& x : v) add(x);
  } else {
    add(v);
  }
}

// rope_scaling (Hub) or rope_parameters (transformers 5.x): one dict either way.
void parse_rope(const json& j, const fs::path& path, ModelConfig& c) {
  json rope = json::object();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = j["rope_parameters"];
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
    for (auto& [k, v] : j["rope_scaling"].items()) rope[k] = v;
  Fields top(j, path);
  RopeParameters& r = c.rope;
  r.rope_theta = top.optional_double("rope_theta", 10000.0);
  r.partial_rotary_factor = top.optional_double("partial_rotary_factor", 1.0);
  Fields f(rope, path);
  r.rope_theta = f.optional_double("rope_theta", r.rope_theta);
  r.partial_rotary_factor = f.optional_double("partial_rotary_factor", r.partial_rotary_factor);
  std::string type = f.optional_string("rope_type", f.optional_string("type", "default"));
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn")
    fail("{}: field 'rope_scaling.rope_type' = '{}' is not supported (default, linear, llama3, yarn)",
         path.string(), type);
  r.rope_type = type;
  if (type != "default") {
    if (!rope.contains("factor")) fail("{}: field 'rope_scaling.factor' is required for rope_type '{}'", path.string(), type);
    r.factor = f.optional_double("factor", 1.0);
    if (rope["factor"].is_null() && type == "yarn") r.factor = 0;  // resolved below from the ratio
  }
  int64_t orig = f.optional_int("original_max_position_embeddings",
                                top.optional_int("original_max_position_embeddings", c.max_position_embeddings));
  r.original_max_position_embeddings = orig;
  if (type == "yarn" && r.factor == 0 && orig > 0) r.factor = double(c.max_position_embeddings) / double(orig);
  r.low_freq_factor = f.optional_double("low_freq_factor", 1.0);
  r.high_freq_factor = f.optional_double("high_freq_factor", 4.0);
  double bf = f.optional_double("beta_fast", 32.0), bs = f.optional_double("beta_slow", 1.0);
  r.beta_fast = bf == 0 ? 32.0 : bf;
  r.beta_slow = bs == 0 ? 1.0 : bs;
  if (rope.contains("attention_factor") && !rope["attention_factor"].is_null())
    r.attention_factor = f.optional_double("attention_factor", 1.0);
  if (rope.contains("mscale") && !rope["mscale"].is_null()) r.mscale = f.optional_double("mscale", 1.0);
  if (rope.contains("mscale_all_dim") && !rope["mscale_all_dim"].is_null())
    r.mscale_all_dim = f.optional_double("mscale_all_dim", 1.0);
  r.truncate = f.optional_bool("truncate", true);
  if (type == "llama3" && r.original_max_position_embeddings <= 0)
    fail("{}: field 'rope_scaling.original_max_position_embeddings' is required for llama3 rope", path.string());
}

}  // namespace

ModelConfig ModelConfig::load(const fs::path& dir) {
  fs::path path = dir / "config.json";
  json j = read_json(path);
  if (!j.is_object()) fail("{}: top level must be a JSON object", path.string());
  ModelConfig c;
  c.path = path;
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    fail("{}: required field 'architectures' is missing or not a list of names", path.string());
  c.architecture = j["architectures"][0].get<std::string>();
  Fields f(j, path);
  c.model_type = f.optional_string("model_type", "");
  c.hidden_size = f.required_int("hidden_size");
  c.num_hidden_layers = f.required_int("num_hidden_layers");
  c.num_attention_heads = f.required_int("num_attention_heads");
  c.num_key_value_heads = f.optional_int("num_key_value_heads", c.num_attention_heads, 1);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", path.string(),
         c.num_attention_heads, c.num_key_value_heads);
  // LlamaConfig fills hidden_size / num_attention_heads when head_dim is absent (or null).
  c.head_dim = f.optional_int("head_dim", c.hidden_size / c.num_attention_heads, 1);
  if (c.head_dim % 2 != 0) fail("{}: field 'head_dim' must be even, got {}", path.string(), c.head_dim);
  c.intermediate_size = f.required_int("intermediate_size");
  c.vocab_size = f.required_int("vocab_size");
  c.max_position_embeddings = f.optional_int("max_position_embeddings", 4096, 1);
  c.rms_norm_eps = f.optional_double("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) fail("{}: field 'rms_norm_eps' must be > 0", path.string());
  c.hidden_act = f.optional_string("hidden_act", "silu");
  if (c.hidden_act != "silu") fail("{}: field 'hidden_act' = '{}' is not supported (silu)", path.string(), c.hidden_act);
  c.tie_word_embeddings = f.optional_bool("tie_word_embeddings", false);
  c.attention_bias = f.optional_bool("attention_bias", false);
  c.mlp_bias = f.optional_bool("mlp_bias", false);
  c.torch_dtype = f.optional_string("torch_dtype", f.optional_string("dtype", ""));
  parse_rope(j, path, c);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const json& t : j["layer_types"]) {
      if (!t.is_string()) fail("{}: field 'layer_types' must be a list of strings", path.string());
      c.layer_types.push_back(t.get<std::string>());
    }
    if (int64_t(c.layer_types.size()) != c.num_hidden_layers)
      fail("{}: field 'layer_types' has {} entries for {} layers", path.string(), c.layer_types.size(),
           c.num_hidden_layers);
  } else {
    c.layer_types.assign(size_t(c.num_hidden_layers), "full_attention");
    if (f.optional_bool("use_sliding_window", false)) {
      int64_t first = f.optional_int("max_window_layers", c.num_hidden_layers);
      for (int64_t i = first; i < c.num_hidden_layers; ++i) c.layer_types[size_t(i)] = "sliding_attention";
    }
  }
  c.sliding_window = f.optional_int("sliding_window", 0);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = int32_t(j["bos_token_id"].get<int64_t>());
  if (j.contains("eos_token_id")) parse_token_ids(j["eos_token_id"], path, "eos_token_id", c.eos_token_ids);
  fs::path gen = dir / "generation_config.json";
  if (fs::exists(gen)) {
    json g = read_json(gen);
    if (g.is_object() && g.contains("eos_token_id"))
      parse_token_ids(g["eos_token_id"], gen, "eos_token_id", c.eos_token_ids);
  }
  for (int32_t id : c.eos_token_ids)
    if (id >= c.vocab_size) fail("{}: eos_token_id {} is not below vocab_size {}", path.string(), id, c.vocab_size);
  return c;
}

}  // namespace rill
