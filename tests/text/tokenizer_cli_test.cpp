// tests/text/tokenizer_cli_test.cpp — `rill tokenize` / `rill detokenize` end to end, against the
// HF fixture ids of corpus strings (Gemma 3: with and without BOS).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "text/tokenizer_test_util.h"

namespace rill::text {
namespace {

using testing::corpus;
using testing::hf_fixture;
using testing::model_dir;

std::string run(const std::string& cmd, const std::string& input) {
  auto in = std::filesystem::temp_directory_path() / ("rill_cli_in_" + std::to_string(::getpid()));
  std::ofstream(in, std::ios::binary) << input;
  std::string full = cmd + " < '" + in.string() + "'";
  std::string out;
  if (FILE* p = ::popen(full.c_str(), "r")) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    EXPECT_EQ(::pclose(p), 0) << full;
  }
  std::filesystem::remove(in);
  return out;
}

std::string ids_line(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "\n";
}

TEST(TokenizeCli, MatchesHfIds) {
  const auto& texts = corpus();
  const size_t index = 10;  // "Hello world"
  ASSERT_EQ(texts[index], "Hello world");
  for (const char* name : {"qwen3", "gemma3"}) {
    ASSERT_TRUE(std::filesystem::exists(model_dir(name) / "tokenizer.json")) << "run scripts/setup";
    const auto& rec = hf_fixture(name).corpus_records.at(index);
    auto ids = rec.at("ids").get<std::vector<int32_t>>();
    auto ns = rec.contains("ns") ? rec.at("ns").get<std::vector<int32_t>>() : ids;
    std::string base = std::string(RILL_BINARY) + " tokenize --model '" + model_dir(name).string() + "'";
    if (std::string(name) == "gemma3") {  // BOS added by default, not with --no-special
      EXPECT_EQ(run(base, texts[index]), ids_line(ids)) << name;
      EXPECT_EQ(run(base + " --no-special", texts[index]), ids_line(ns)) << name;
      continue;
    }
    EXPECT_EQ(run(base, texts[index]), ids_line(ids)) << name;
    std::string detok = std::string(RILL_BINARY) + " detokenize --model '" + model_dir(name).string() + "'";
    std::string csv;
    for (size_t i = 0; i < ns.size(); ++i) csv += (i ? ", " : "") + std::to_string(ns[i]);
    EXPECT_EQ(run(detok, csv + "\n"), texts[index]) << name;
  }
}

}  // namespace
}  // namespace rill::text
