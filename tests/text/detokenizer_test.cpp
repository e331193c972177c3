// tests/text/detokenizer_test.cpp — the incremental detokenizer against HF's full decode: for every
// corpus encoding and every decode-only id sequence of the fixtures, the streamed chunks are valid
// UTF-8 one by one and concatenate to tok.decode(ids) as transformers produced it.
#include <gtest/gtest.h>

#include "text/tokenizer_test_util.h"
#include "text/detokenizer.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace rill::text {
namespace {

using testing::corpus;
using testing::hf_fixture;
using testing::ids_str;
using testing::real_tokenizer;

std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip, bool& chunks_valid) {
  IncrementalDetokenizer detok(tok, skip);
  std::string all;
  chunks_valid = true;
  for (int32_t id : ids) {
    std::string chunk = detok.push(id);
    chunks_valid = chunks_valid && is_valid_utf8(chunk);
    all += chunk;
  }
  std::string tail = detok.flush();
  chunks_valid = chunks_valid && is_valid_utf8(tail);
  return all + tail;
}

class DetokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(DetokenizerParity, StreamEqualsHfDecode) {
  const Tokenizer* tok = real_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  const auto& fx = hf_fixture(GetParam());
  const auto& texts = corpus();
  int failures = 0, checked = 0;
  auto check = [&](const std::vector<int32_t>& ids, bool skip, const std::string& want) {
    ++checked;
    bool valid = false;
    std::string got = stream(*tok, ids, skip, valid);
    if (got == want && valid) return;
    if (++failures <= 8)
      ADD_FAILURE() << GetParam() << " skip=" << skip << " ids=" << ids_str(ids) << " chunks valid=" << valid
                    << "\n  got:  " << nlohmann::json(sanitize_utf8(got)).dump()
                    << "\n  want: " << nlohmann::json(want).dump();
  };
  for (const auto& r : fx.corpus_records) {
    const std::string& text = texts[r.at("i").get<size_t>()];
    auto ids = r.at("ids").get<std::vector<int32_t>>();
    check(ids, false, r.value("d0", text));
    check(ids, true, r.value("d1", text));
  }
  for (const auto& r : fx.decode_records) {
    auto ids = r.at("r").get<std::vector<int32_t>>();
    check(ids, false, r.at("d0").get<std::string>());
    check(ids, true, r.at("d1").get<std::string>());
  }
  EXPECT_EQ(failures, 0) << "mismatching streams out of " << checked;
}

// A character split over byte tokens is held back until complete, then emitted whole.
TEST(Detokenizer, HoldsSplitCharacterUntilComplete) {
  const Tokenizer* tok = real_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  // "€" is E2 82 AC; the byte-level characters for those bytes are single-byte tokens.
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("\xE2\x82\xAC")) {
    auto id = tok->token_to_id(byte_level_chars()[b]);
    ASSERT_TRUE(id.has_value());
    ids.push_back(*id);
  }
  IncrementalDetokenizer detok(*tok);
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_EQ(detok.push(ids[1]), "");
  EXPECT_EQ(detok.push(ids[2]), "\xE2\x82\xAC");
  EXPECT_EQ(detok.flush(), "");
  // An unfinished character at the end becomes one U+FFFD (as Rust's from_utf8_lossy).
  IncrementalDetokenizer cut(*tok);
  EXPECT_EQ(cut.push(ids[0]), "");
  EXPECT_EQ(cut.push(ids[1]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, DetokenizerParity, ::testing::Values("qwen3", "llama3", "gemma3"));

}  // namespace
}  // namespace rill::text
