// Bad input at load time: missing, truncated or lying safetensors files, configs without a
// required field or with an unsupported architecture, weights whose shape disagrees with the
// config. Each must be a rill::Error whose message names the file/field/tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/layers/rope.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace rill {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kQwen3 = fs::path(RILL_SOURCE_DIR) / "tests/fixtures/models/qwen3-tiny";

class TempModel {
 public:
  TempModel() {
    dir_ = fs::temp_directory_path() / ("rill-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kQwen3 / f, dir_ / f);
  }
  ~TempModel() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }
  json config() const {
    std::ifstream in(dir_ / "config.json");
    return json::parse(in);
  }
  void write_config(const json& j) const { std::ofstream(dir_ / "config.json") << j.dump(2); }
  std::string read_weights() const {
    std::ifstream in(dir_ / "model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void write_weights(const std::string& bytes) const {
    std::ofstream(dir_ / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

std::string load_error(const fs::path& dir) {
  auto kernels = make_cpu_kernels();
  try {
    load_model(dir, *kernels, LoadOptions{std::nullopt, false});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites the JSON header of a safetensors blob (keeping the data section).
std::string with_header(const std::string& blob, const std::function<void(json&)>& edit) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(blob[size_t(i)]);
  json h = json::parse(blob.substr(8, n));
  edit(h);
  std::string s = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((s.size() >> (8 * i)) & 0xff);
  return out + s + blob.substr(8 + n);
}

TEST(Loading, FixtureLoads) {
  TempModel m;
  EXPECT_EQ(load_error(m.dir()), "");
}

TEST(Loading, MissingWeightsFile) {
  TempModel m;
  fs::remove(m.dir() / "model.safetensors");
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST(Loading, TruncatedFile) {
  TempModel m;
  std::string blob = m.read_weights();
  m.write_weights(blob.substr(0, blob.size() - 1000));
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  m.write_weights(blob.substr(0, 5));
  e = load_error(m.dir());
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  m.write_weights(blob.substr(0, 200));  // header length larger than the file
  e = load_error(m.dir());
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(Loading, LyingOffsets) {
  TempModel m;
  m.write_weights(with_header(m.read_weights(), [](json& h) {
    h["model.norm.weight"]["data_offsets"] = {0, 1u << 30};
  }));
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

TEST(Loading, DtypeMismatch) {
  TempModel m;
  m.write_weights(with_header(m.read_weights(), [](json& h) { h["model.norm.weight"]["dtype"] = "BF16"; }));
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("mismatch"), std::string::npos) << e;
  m.write_weights(with_header(m.read_weights(), [](json& h) { h["model.norm.weight"]["dtype"] = "F8_E5M2"; }));
  e = load_error(m.dir());
  EXPECT_NE(e.find("unsupported dtype"), std::string::npos) << e;
}

TEST(Loading, GarbageHeader) {
  TempModel m;
  std::string blob = m.read_weights();
  blob[8] = '[';  // the header must be a JSON object; make it unparsable
  blob[9] = ':';
  m.write_weights(blob);
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
}

TEST(Loading, MissingRequiredConfigField) {
  TempModel m;
  json c = m.config();
  c.erase("hidden_size");
  m.write_config(c);
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("'hidden_size'"), std::string::npos) << e;
}

TEST(Loading, WrongTypeConfigField) {
  TempModel m;
  json c = m.config();
  c["num_attention_heads"] = "four";
  m.write_config(c);
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("'num_attention_heads'"), std::string::npos) << e;
}

TEST(Loading, UnsupportedArchitecture) {
  TempModel m;
  json c = m.config();
  c["architectures"] = {"GPT2LMHeadModel"};
  m.write_config(c);
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("GPT2LMHeadModel"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
}

TEST(Loading, ConfigDisagreesWithWeights) {
  TempModel m;
  json c = m.config();
  c["intermediate_size"] = 128;
  m.write_config(c);
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("mlp.gate_proj.weight"), std::string::npos) << e;
}

TEST(Loading, MissingConfig) {
  TempModel m;
  fs::remove(m.dir() / "config.json");
  std::string e = load_error(m.dir());
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
}

TEST(Config, HubFormEqualsSavedForm) {
  TempModel m;
  json c = m.config();
  c.erase("rope_parameters");
  c.erase("layer_types");
  c["rope_theta"] = 500000.0;
  c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  c["eos_token_id"] = {2, 7};
  m.write_config(c);
  ModelConfig cfg = ModelConfig::load(m.dir());
  EXPECT_EQ(cfg.rope.rope_type, "llama3");
  EXPECT_EQ(cfg.rope.rope_theta, 500000.0);
  EXPECT_EQ(cfg.rope.original_max_position_embeddings, 64);
  EXPECT_EQ(cfg.eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(cfg.layer_types.size(), size_t(cfg.num_hidden_layers));
}

TEST(Rope, Llama3BandsAgainstDoublePrecision) {
  RopeParameters r;
  r.rope_type = "llama3";
  r.rope_theta = 500000;
  r.factor = 8;
  r.original_max_position_embeddings = 8192;
  RopeFrequencies f = compute_rope_frequencies(r, 128);
  ASSERT_EQ(f.inv_freq.size(), 64u);
  for (int j = 0; j < 64; ++j) {
    double inv = 1.0 / std::pow(500000.0, 2.0 * j / 128);
    double wavelen = 2 * M_PI / inv, expect;
    if (wavelen < 8192 / 4.0) expect = inv;
    else if (wavelen > 8192 / 1.0) expect = inv / 8;
    else {
      double s = (8192 / wavelen - 1) / 3;
      expect = (1 - s) * inv / 8 + s * inv;
    }
    EXPECT_NEAR(f.inv_freq[size_t(j)], expect, 1e-6 * expect) << j;
  }
}

TEST(Rope, YarnAttentionFactorAndPartialRotary) {
  RopeParameters r;
  r.rope_type = "yarn";
  r.rope_theta = 1e6;
  r.factor = 4;
  r.original_max_position_embeddings = 32768;
  RopeFrequencies f = compute_rope_frequencies(r, 128);
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1, 1e-6);
  r.rope_type = "default";
  r.partial_rotary_factor = 0.25;
  f = compute_rope_frequencies(r, 256);
  EXPECT_EQ(f.rotary_dim, 64);
  EXPECT_EQ(f.inv_freq.size(), 32u);
  EXPECT_NEAR(f.inv_freq[1], 1.0 / std::pow(1e6, 2.0 / 64), 1e-7);  // f32 table
}

}  // namespace
}  // namespace rill
