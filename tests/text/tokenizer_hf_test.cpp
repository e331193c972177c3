// tests/text/tokenizer_hf_test.cpp — exact parity with Hugging Face transformers 5 / tokenizers
// on the whole corpus for the Qwen3, Llama 3 and Gemma 3 tokenizer files: ids with and without
// special tokens, special-token text encoded literally, and decode with/without skipping specials.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "text/tokenizer_test_util.h"
#include "text/utf8.h"

namespace rill::text {
namespace {

using testing::corpus;
using testing::hf_fixture;
using testing::ids_str;
using testing::real_tokenizer;

class HfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParity, HeaderFacts) {
  const Tokenizer* tok = real_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  const auto& h = hf_fixture(GetParam()).header;
  ASSERT_FALSE(h.is_null());
  EXPECT_EQ(tok->vocab_size(), h.at("len").get<int32_t>());
  if (h.at("bos_token_id").is_null()) EXPECT_FALSE(tok->bos_id().has_value());
  else EXPECT_EQ(tok->bos_id(), h.at("bos_token_id").get<int32_t>());
  if (h.at("eos_token_id").is_null()) EXPECT_FALSE(tok->eos_id().has_value());
  else EXPECT_EQ(tok->eos_id(), h.at("eos_token_id").get<int32_t>());
  EXPECT_EQ(tok->eos_token(), h.at("eos_token").get<std::string>());
  for (int32_t id : h.at("all_special_ids").get<std::vector<int32_t>>()) EXPECT_TRUE(tok->is_special(id)) << id;
}

TEST_P(HfParity, EncodeCorpus) {
  const Tokenizer* tok = real_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  const auto& fx = hf_fixture(GetParam());
  const auto& texts = corpus();
  ASSERT_EQ(fx.corpus_records.size(), texts.size()) << "fixture and corpus.jsonl disagree: regenerate";
  ASSERT_GE(texts.size(), 2000u);
  int failures = 0;
  auto check = [&](const std::string& what, size_t i, const std::vector<int32_t>& got,
                   const std::vector<int32_t>& want) {
    if (got == want) return;
    if (++failures <= 8)
      ADD_FAILURE() << GetParam() << " " << what << " #" << i << " text=" << nlohmann::json(texts[i]).dump()
                    << "\n  got:  " << ids_str(got) << "\n  want: " << ids_str(want);
  };
  for (const auto& r : fx.corpus_records) {
    size_t i = r.at("i").get<size_t>();
    auto ids = r.at("ids").get<std::vector<int32_t>>();
    auto ns = r.contains("ns") ? r.at("ns").get<std::vector<int32_t>>() : ids;
    auto lit = r.contains("lit") ? r.at("lit").get<std::vector<int32_t>>() : ns;
    check("with special tokens", i, tok->encode(texts[i]), ids);
    check("without special tokens", i, tok->encode(texts[i], {.add_special_tokens = false}), ns);
    check("special text as plain text", i, tok->encode(texts[i], {.add_special_tokens = false, .parse_special = false}),
          lit);
  }
  EXPECT_EQ(failures, 0) << "mismatching encodes out of " << 3 * texts.size();
}

TEST_P(HfParity, DecodeCorpusAndIdSequences) {
  const Tokenizer* tok = real_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  const auto& fx = hf_fixture(GetParam());
  const auto& texts = corpus();
  int failures = 0, checked = 0;
  auto check = [&](const std::string& what, const std::vector<int32_t>& ids, const std::string& got,
                   const std::string& want) {
    ++checked;
    if (got == want) return;
    if (++failures <= 8)
      ADD_FAILURE() << GetParam() << " " << what << " ids=" << ids_str(ids) << "\n  got:  " << nlohmann::json(got).dump()
                    << "\n  want: " << nlohmann::json(want).dump();
  };
  for (const auto& r : fx.corpus_records) {
    const std::string& text = texts[r.at("i").get<size_t>()];
    auto ids = r.at("ids").get<std::vector<int32_t>>();
    check("decode", ids, tok->decode(ids), r.value("d0", text));
    check("decode skip_special", ids, tok->decode(ids, true), r.value("d1", text));
  }
  for (const auto& r : fx.decode_records) {
    auto ids = r.at("r").get<std::vector<int32_t>>();
    check("decode ids", ids, tok->decode(ids), r.at("d0").get<std::string>());
    check("decode ids skip_special", ids, tok->decode(ids, true), r.at("d1").get<std::string>());
  }
  EXPECT_EQ(failures, 0) << "mismatching decodes out of " << checked;
  EXPECT_GT(fx.decode_records.size(), 500u);
}

// Encoding from several threads at once (per-thread caches, shared model) gives HF's ids.
TEST(HfParityThreads, ConcurrentEncodeMatches) {
  const Tokenizer* tok = real_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  const auto& fx = hf_fixture("qwen3");
  const auto& texts = corpus();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < fx.corpus_records.size(); ++k) {
        const auto& r = fx.corpus_records[(k * 7 + size_t(t) * 101) % fx.corpus_records.size()];
        if (tok->encode(texts[r.at("i").get<size_t>()]) != r.at("ids").get<std::vector<int32_t>>()) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, HfParity, ::testing::Values("qwen3", "llama3", "gemma3"));

}  // namespace
}  // namespace rill::text
