// model/config.h — ModelConfig: the fields of a Hugging Face config.json that rill uses, under
// their HF names. Parses both the Hub form (rope_theta + rope_scaling) and the form written by
// transformers 5.x (rope_parameters, layer_types). Every missing or invalid required field is
// a rill::Error naming the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace rill {

struct RopeParameters {
  std::string rope_type = "default";  ///< default | linear | llama3 | yarn
  double rope_theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;       ///< llama3
  double high_freq_factor = 4.0;      ///< llama3
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;            ///< yarn
  double beta_slow = 1.0;             ///< yarn
  std::optional<double> attention_factor;  ///< yarn: explicit attention factor
  std::optional<double> mscale;            ///< yarn (DeepSeek-style)
  std::optional<double> mscale_all_dim;    ///< yarn
  bool truncate = true;                    ///< yarn
  double partial_rotary_factor = 1.0;
};

struct ModelConfig {
  std::filesystem::path path;           ///< config.json this came from (for messages)
  std::string architecture;             ///< architectures[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  RopeParameters rope;
  std::vector<std::string> layer_types;  ///< per layer; "full_attention" when absent
  int64_t sliding_window = 0;            ///< 0 when unused
  std::string torch_dtype;               ///< as written ("bfloat16", "float32"), "" if absent
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;    ///< config.json and generation_config.json merged

  /// Reads `dir`/config.json (and generation_config.json when present).
  static ModelConfig load(const std::filesystem::path& dir);
};

}  // namespace rill
