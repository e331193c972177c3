// tests/text/tokenizer_synth_test.cpp — small tokenizers trained by tools/make_tokenizer_fixtures.py
// with the pieces the three real files do not use (Metaspace prepend_scheme first/always, Prepend +
// Replace normalizers, NFKC/NFD, Strip decoder, ByteLevel add_prefix_space with the GPT-2 regex,
// added tokens with lstrip/rstrip/single_word/normalized, TemplateProcessing <s> $A </s>), checked
// against the tokenizers library's own encode/decode of the same file.
#include <gtest/gtest.h>

#include <fstream>

#include "text/detokenizer.h"
#include "text/tokenizer_test_util.h"

namespace rill::text {
namespace {

using testing::fixture_dir;
using testing::ids_str;

const nlohmann::json& synth() {
  static const nlohmann::json j = [] {
    std::ifstream f(fixture_dir() / "synth.json", std::ios::binary);
    return nlohmann::json::parse(f);
  }();
  return j;
}

TEST(SynthTokenizers, MatchTokenizersLibrary) {
  const auto& list = synth().at("tokenizers_list");
  ASSERT_EQ(list.size(), 4u);
  auto dir = std::filesystem::temp_directory_path() / ("rill_synth_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const auto& entry : list) {
    std::string name = entry.at("name").get<std::string>();
    auto path = dir / (name + ".json");
    std::ofstream(path) << entry.at("tokenizer").dump();
    Tokenizer tok = Tokenizer::load_files(path, {});
    int failures = 0, checked = 0;
    auto fail_once = [&](const std::string& msg) {
      if (++failures <= 6) ADD_FAILURE() << name << ": " << msg;
    };
    for (const auto& c : entry.at("cases")) {
      if (c.contains("text")) {
        std::string text = c.at("text").get<std::string>();
        auto ids = c.at("ids").get<std::vector<int32_t>>();
        auto ns = c.contains("ns") ? c.at("ns").get<std::vector<int32_t>>() : ids;
        auto lit = c.contains("lit") ? c.at("lit").get<std::vector<int32_t>>() : ns;
        std::string j = nlohmann::json(text).dump();
        auto got = tok.encode(text);
        if (got != ids) fail_once("encode " + j + "\n got  " + ids_str(got) + "\n want " + ids_str(ids));
        got = tok.encode(text, {.add_special_tokens = false});
        if (got != ns) fail_once("encode no-special " + j + "\n got  " + ids_str(got) + "\n want " + ids_str(ns));
        got = tok.encode(text, {.add_special_tokens = false, .parse_special = false});
        if (got != lit) fail_once("encode literal " + j + "\n got  " + ids_str(got) + "\n want " + ids_str(lit));
        checked += 3;
      }
      std::vector<int32_t> ids = c.contains("r") ? c.at("r").get<std::vector<int32_t>>() : c.at("ids").get<std::vector<int32_t>>();
      for (int skip = 0; skip < 2; ++skip) {
        const auto& want_j = c.at(skip ? "d1" : "d0");
        if (!want_j.is_string()) continue;  // tokenizers raised an error on this sequence
        std::string want = want_j.get<std::string>();
        std::string got = tok.decode(ids, skip != 0);
        if (got != want)
          fail_once("decode " + ids_str(ids) + " skip=" + std::to_string(skip) + "\n got  " +
                    nlohmann::json(got).dump() + "\n want " + nlohmann::json(want).dump());
        IncrementalDetokenizer detok(tok, skip != 0);
        std::string streamed;
        for (int32_t id : ids) streamed += detok.push(id);
        streamed += detok.flush();
        if (streamed != want) fail_once("stream " + ids_str(ids) + " got " + nlohmann::json(streamed).dump());
        checked += 2;
      }
    }
    EXPECT_EQ(failures, 0) << name << ": " << failures << " failures out of " << checked;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rill::text
