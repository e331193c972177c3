// Weights split over shards with model.safetensors.index.json, and weights stored as f16, load
// and compute what the single-file f32 fixture computes (shards: bitwise; f16: within 1e-3, as
// f16 holds the fixture's bf16 weights exactly but for the tiniest). A shard missing a weight
// the index assigns to it is an error naming the weight.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/model_runner.h"
#include "core/error.h"

namespace rill {
namespace {
namespace fs = std::filesystem;
using test::kFixtures;
using test::Runner;
using test::Seq;

// Copies qwen3-tiny into `dir`, its tensors spread round-robin over `shards` files, stored as `dtype`.
void write_variant(const fs::path& dir, int shards, DType dtype) {
  fs::create_directories(dir);
  fs::copy_file(kFixtures + "qwen3-tiny/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  SafetensorsFile src(kFixtures + "qwen3-tiny/model.safetensors");
  std::vector<std::vector<TensorToWrite>> parts(static_cast<size_t>(shards));
  std::vector<std::vector<char>> storage;
  storage.reserve(src.tensors().size());
  nlohmann::json map = nlohmann::json::object();
  int i = 0;
  for (const auto& [name, info] : src.tensors()) {
    size_t n = info.nbytes / 4;
    storage.emplace_back(n * dtype_size(dtype));
    const float* f = static_cast<const float*>(info.data);
    for (size_t k = 0; k < n; ++k) {
      if (dtype == DType::f16) reinterpret_cast<f16_t*>(storage.back().data())[k] = f32_to_f16(f[k]);
      else reinterpret_cast<float*>(storage.back().data())[k] = f[k];
    }
    std::string file = shards == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", i % shards + 1, shards);
    parts[size_t(i % shards)].push_back({name, dtype, info.shape, storage.back().data(), storage.back().size()});
    map[name] = file;
    ++i;
  }
  for (int s = 0; s < shards; ++s) {
    std::string file = shards == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
    write_safetensors(dir / file, parts[size_t(s)]);
  }
  if (shards > 1) std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
}

std::vector<float> logits_of(const std::string& model_dir_relative_to_fixtures) {
  Runner run(model_dir_relative_to_fixtures, std::nullopt, 16);
  Seq seq;
  return run.step({{&seq, {5, 17, 300, 42, 9}, Logits::all}});
}

TEST(Sharded, ShardsAndF16EqualTheSingleFile) {
  const fs::path base = fs::temp_directory_path() / ("rill-shard-" + std::to_string(::getpid()));
  write_variant(base / "sharded", 3, DType::f32);
  write_variant(base / "f16", 1, DType::f16);
  std::vector<float> ref = logits_of("qwen3-tiny");
  // Runner resolves names under the fixtures folder; pass a path relative to it.
  const std::string rel = fs::relative(base, kFixtures).string() + "/";
  EXPECT_EQ(logits_of(rel + "sharded"), ref);
  // f16 holds the bf16 weights exactly except the tiniest (f16 subnormals below 6e-5).
  std::vector<float> f16 = logits_of(rel + "f16");
  ASSERT_EQ(f16.size(), ref.size());
  EXPECT_LE(test::max_abs_diff(f16, ref.data(), ref.size()), 1e-3f);
  EXPECT_NE(f16, std::vector<float>(f16.size(), 0.f));

  // A shard that lacks a weight the index assigns to it.
  std::ifstream in(base / "sharded/model.safetensors.index.json");
  auto index = nlohmann::json::parse(in);
  index["weight_map"]["model.norm.weight"] = index["weight_map"]["model.norm.weight"] == "model-00001-of-00003.safetensors"
                                                 ? "model-00002-of-00003.safetensors"
                                                 : "model-00001-of-00003.safetensors";
  std::ofstream(base / "sharded/model.safetensors.index.json") << index.dump();
  try {
    WeightStore store(base / "sharded");
    ADD_FAILURE() << "a weight listed for the wrong shard must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(base);
}

}  // namespace
}  // namespace rill
