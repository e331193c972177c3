// tests/text/tokenizer_errors_test.cpp — bad input: invalid UTF-8 text (replaced with U+FFFD, the
// documented policy, never a crash), unsupported tokenizer.json component types and missing or
// malformed files (rill::Error naming the type and the file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "core/error.h"
#include "text/tokenizer_test_util.h"

namespace rill::text {
namespace {

using testing::real_tokenizer;

TEST(TokenizerBadInput, InvalidUtf8IsReplacedLikePython) {
  for (const char* name : {"qwen3", "llama3", "gemma3"}) {
    const Tokenizer* tok = real_tokenizer(name);
    ASSERT_NE(tok, nullptr);
    // b"a\xffb\xe2\x82 c\xed\xa0\x80".decode(errors="replace") == "a\ufffdb\ufffd c\ufffd\ufffd\ufffd"
    EXPECT_EQ(tok->encode("a\xff" "b\xe2\x82 c\xed\xa0\x80"),
              tok->encode("a\xEF\xBF\xBD" "b\xEF\xBF\xBD c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"))
        << name;
    EXPECT_EQ(tok->encode(std::string("\xc0\x80\xf5", 3)),
              tok->encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"))
        << name;
    // Decoding ids is never an error either: unknown ids are dropped, as in tokenizers.
    std::vector<int32_t> ids = {-5, tok->vocab_size() + 100};
    EXPECT_EQ(tok->decode(ids), "") << name;
  }
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("rill_tok_err_" + std::to_string(::getpid()) + "_" +
                                                                std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// A valid minimal byte-level BPE with one merge; `patch` replaces one top-level section.
std::string minimal_tokenizer(const std::string& section = "", const std::string& value = "") {
  nlohmann::json j = nlohmann::json::parse(R"({
    "version": "1.0", "added_tokens": [{"id": 3, "content": "<s>", "special": true}],
    "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
  if (!section.empty()) j[section] = nlohmann::json::parse(value);
  return j.dump();
}

std::string load_error(const TempDir& dir) {
  try {
    Tokenizer::load(dir.path());
  } catch (const rill::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerBadInput, MinimalTokenizerWorks) {
  TempDir dir;
  dir.write("tokenizer.json", minimal_tokenizer());
  Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.encode("abab<s>a"), (std::vector<int32_t>{2, 2, 3, 0}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{2, 3, 0}), "ab<s>a");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{2, 3, 0}, true), "aba");
  EXPECT_FALSE(tok.bos_id().has_value());  // no tokenizer_config.json
}

TEST(TokenizerBadInput, UnsupportedTypesNameTheTypeAndFile) {
  struct Case {
    std::string section, value, type;
  };
  std::vector<Case> cases = {
      {"model", R"({"type": "WordPiece", "vocab": {}})", "WordPiece"},
      {"normalizer", R"({"type": "BertNormalizer"})", "BertNormalizer"},
      {"pre_tokenizer", R"({"type": "Whitespace"})", "Whitespace"},
      {"pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}]})", "Digits"},
      {"decoder", R"({"type": "WordPiece"})", "WordPiece"},
      {"post_processor", R"({"type": "Mystery"})", "Mystery"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    dir.write("tokenizer.json", minimal_tokenizer(c.section, c.value));
    std::string msg = load_error(dir);
    EXPECT_NE(msg.find("'" + c.type + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find((dir.path() / "tokenizer.json").string()), std::string::npos) << msg;
  }
}

TEST(TokenizerBadInput, MissingAndMalformedFilesNameThePath) {
  TempDir dir;
  std::string msg = load_error(dir);  // directory without tokenizer.json
  EXPECT_NE(msg.find((dir.path() / "tokenizer.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;

  auto missing_dir = dir.path() / "no_such_model";
  try {
    Tokenizer::load(missing_dir);
    ADD_FAILURE() << "no error for a missing directory";
  } catch (const rill::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing_dir.string()), std::string::npos) << e.what();
  }

  dir.write("tokenizer.json", "{\"model\": ");
  msg = load_error(dir);
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find((dir.path() / "tokenizer.json").string()), std::string::npos) << msg;

  dir.write("tokenizer.json", minimal_tokenizer("model", R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})"));
  msg = load_error(dir);
  EXPECT_NE(msg.find("merge"), std::string::npos) << msg;

  dir.write("tokenizer.json", minimal_tokenizer());
  dir.write("tokenizer_config.json", "[not json");
  msg = load_error(dir);
  EXPECT_NE(msg.find((dir.path() / "tokenizer_config.json").string()), std::string::npos) << msg;
}

}  // namespace
}  // namespace rill::text
