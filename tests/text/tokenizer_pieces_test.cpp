// tests/text/tokenizer_pieces_test.cpp — focused cases for the tricky pieces, with expectations
// taken from Hugging Face tokenizers 0.23 (the synth.json fixture and the real Gemma 3 file):
// Metaspace prepend_scheme first vs always, added-token lstrip/rstrip/single_word, byte fallback
// (encode and the ByteFallback decoder's one-U+FFFD-per-byte rule).
#include <gtest/gtest.h>

#include <fstream>

#include "text/detokenizer.h"
#include "text/tokenizer_test_util.h"

namespace rill::text {
namespace {

using testing::fixture_dir;

const Tokenizer& synth_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> loaded;
  if (auto it = loaded.find(name); it != loaded.end()) return it->second;
  std::ifstream f(fixture_dir() / "synth.json", std::ios::binary);
  auto all = nlohmann::json::parse(f);
  for (const auto& e : all.at("tokenizers_list")) {
    if (e.at("name") != name) continue;
    auto path = std::filesystem::temp_directory_path() / ("rill_pieces_" + name + std::to_string(::getpid()) + ".json");
    std::ofstream(path) << e.at("tokenizer").dump();
    Tokenizer tok = Tokenizer::load_files(path, {});
    std::filesystem::remove(path);
    return loaded.emplace(name, std::move(tok)).first->second;
  }
  throw std::runtime_error("no synthetic tokenizer " + name);
}

std::vector<std::string> pieces(const Tokenizer& tok, const std::string& text) {
  std::vector<std::string> out;
  for (int32_t id : tok.encode(text, {.add_special_tokens = false})) out.push_back(tok.id_to_token(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerPieces, MetaspacePrependFirstOnlyAtTextStart) {
  // "first": the segment after an added token gets no ▁; "always": every segment does.
  EXPECT_EQ(pieces(synth_tokenizer("metaspace_first"), "x<sp>y"), (Pieces{"\u2581", "x", "<sp>", "y"}));
  EXPECT_EQ(pieces(synth_tokenizer("metaspace_always"), "x<sp>y"), (Pieces{"\u2581", "x", "<sp>", "\u2581y"}));
  EXPECT_EQ(pieces(synth_tokenizer("metaspace_first"), "Hello world"),
            (Pieces{"\u2581", "H", "e", "ll", "o", "\u2581w", "or", "ld"}));
  // The Metaspace decoder drops the replacement character of the first token only.
  const Tokenizer& tok = synth_tokenizer("metaspace_first");
  EXPECT_EQ(tok.decode(tok.encode("Hello world", {.add_special_tokens = false})), "Hello world");
}

TEST(TokenizerPieces, AddedTokenStripFlagsAbsorbSpaces) {
  // <ls> has lstrip: the space before it is part of the added token; <rs> has rstrip.
  EXPECT_EQ(pieces(synth_tokenizer("metaspace_first"), "a <ls>b"), (Pieces{"\u2581a", "<ls>", "b"}));
  EXPECT_EQ(pieces(synth_tokenizer("metaspace_first"), "a<rs> b"), (Pieces{"\u2581a", "<rs>", "b"}));
  // "hello" is single_word: matched as a word, not inside "sayhello".
  EXPECT_EQ(pieces(synth_tokenizer("gpt2_prefix"), "say hello there"),
            (Pieces{"\u0120s", "ay", "\u0120", "hello", "\u0120there"}));
  EXPECT_EQ(pieces(synth_tokenizer("gpt2_prefix"), "sayhello there"),
            (Pieces{"\u0120s", "ay", "he", "ll", "o", "\u0120there"}));
  // Template post-processor: <s> $A </s>.
  const Tokenizer& tok = synth_tokenizer("metaspace_first");
  auto ids = tok.encode("a");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(tok.id_to_token(ids.front()), "<s>");
  EXPECT_EQ(tok.id_to_token(ids.back()), "</s>");
}

TEST(TokenizerPieces, GemmaByteFallback) {
  const Tokenizer* tok = testing::real_tokenizer("gemma3");
  ASSERT_NE(tok, nullptr);
  // A plane-15 private-use character is not in the vocabulary: one token per UTF-8 byte.
  std::string ch = "\xF3\xB0\x80\x80";
  EXPECT_EQ(pieces(*tok, ch), (Pieces{"<0xF3>", "<0xB0>", "<0x80>", "<0x80>"}));
  auto ids = tok->encode(ch, {.add_special_tokens = false});
  EXPECT_EQ(tok->decode(ids), ch);
  // Byte tokens that do not form valid UTF-8 decode to one U+FFFD per byte token (tokenizers'
  // ByteFallback), not per maximal invalid subsequence.
  std::vector<int32_t> partial(ids.begin(), ids.begin() + 2);
  EXPECT_EQ(tok->decode(partial), "\xEF\xBF\xBD\xEF\xBF\xBD");
  IncrementalDetokenizer detok(*tok);
  std::string streamed = detok.push(partial[0]);
  streamed += detok.push(partial[1]);
  EXPECT_EQ(streamed, "");  // held: the byte run is not finished
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace rill::text
