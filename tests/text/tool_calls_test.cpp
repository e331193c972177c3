// tests/text/tool_calls_test.cpp — tool-call parsing, qwen3 <tool_call> blocks and Llama 3 JSON
// calls: whole texts, every split of the text into two chunks and byte-by-byte streams give the
// same content and calls; broken JSON, unterminated calls and replies that are not calls come back
// as plain text, unchanged; the format is picked from the chat template or by name.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/tool_calls.h"

namespace rill::text {
namespace {

struct Result {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;
};

Result run(const std::vector<std::string>& chunks, ToolFormat format = ToolFormat::qwen3) {
  ToolCallParser p(format);
  Result r;
  auto take = [&](ToolCallParser::Output o) {
    r.content += o.content;
    for (const ToolCall& c : o.calls) r.calls.emplace_back(c.name, c.arguments);
  };
  for (const std::string& c : chunks) take(p.push(c));
  take(p.flush());
  return r;
}

const std::string kText =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";

TEST(ToolCallParser, WholeText) {
  Result r = run({kText});
  EXPECT_EQ(r.content, "Let me check.\n\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].first, "get_weather");
  EXPECT_EQ(r.calls[0].second, R"({"city":"Paris","days":2})");
  EXPECT_EQ(r.calls[1].first, "now");
  EXPECT_EQ(r.calls[1].second, "{}");
}

TEST(ToolCallParser, EverySplitAndCharByCharAgree) {
  const Result whole = run({kText});
  for (size_t cut = 0; cut <= kText.size(); ++cut) {
    Result r = run({kText.substr(0, cut), kText.substr(cut)});
    EXPECT_EQ(r.content, whole.content) << cut;
    EXPECT_EQ(r.calls, whole.calls) << cut;
  }
  std::vector<std::string> chars;
  for (char c : kText) chars.emplace_back(1, c);
  Result r = run(chars);
  EXPECT_EQ(r.content, whole.content);
  EXPECT_EQ(r.calls, whole.calls);
}

TEST(ToolCallParser, PartialTagIsHeldThenReleased) {
  ToolCallParser p;
  EXPECT_EQ(p.push("a <tool_").content, "a ");
  EXPECT_EQ(p.push("x").content, "<tool_x");
}

TEST(ToolCallParser, BrokenBlocksArePlainText) {
  Result r = run({"<tool_call>{not json}</tool_call>ok"});
  EXPECT_EQ(r.content, "<tool_call>{not json}</tool_call>ok");
  EXPECT_TRUE(r.calls.empty());
  r = run({"x<tool_call>{\"name\": \"f\""});
  EXPECT_EQ(r.content, "x<tool_call>{\"name\": \"f\"");
  EXPECT_TRUE(r.calls.empty());
}

/// Whole text, every two-chunk split and byte-by-byte all give `want`.
void expect_stream_invariant(const std::string& text, ToolFormat format, const Result& want) {
  const Result whole = run({text}, format);
  EXPECT_EQ(whole.content, want.content);
  EXPECT_EQ(whole.calls, want.calls);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Result r = run({text.substr(0, cut), text.substr(cut)}, format);
    EXPECT_EQ(r.content, want.content) << "cut at " << cut;
    EXPECT_EQ(r.calls, want.calls) << "cut at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  Result r = run(bytes, format);
  EXPECT_EQ(r.content, want.content);
  EXPECT_EQ(r.calls, want.calls);
}

using Calls = std::vector<std::pair<std::string, std::string>>;

TEST(Llama3ToolCalls, OneCall) {
  expect_stream_invariant(R"({"name": "get_weather", "parameters": {"city": "Paris", "note": "a } in {a string\" }"}})",
                          ToolFormat::llama3,
                          Result{"", Calls{{"get_weather", R"({"city":"Paris","note":"a } in {a string\" }"})"}}});
}

TEST(Llama3ToolCalls, PythonTagAndSeveralCallsSeparatedBySemicolons) {
  expect_stream_invariant(R"(<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}})" "\n",
                          ToolFormat::llama3, Result{"", Calls{{"a", R"({"x":1})"}, {"b", "{}"}}});
  expect_stream_invariant("  \n" R"({"name": "a", "arguments": {"x": [1, 2]}};<|python_tag|>{"name": "c", "parameters": {}})",
                          ToolFormat::llama3, Result{"", Calls{{"a", R"({"x":[1,2]})"}, {"c", "{}"}}});
}

TEST(Llama3ToolCalls, TextThatIsNotACallIsUnchanged) {
  for (const std::string& text : {std::string("Hello! The weather in Paris is {sunny}."),
                                 std::string("  \n Plain answer with a ; and { brace"),
                                 std::string(R"({"name": "Bob", "age": 3})"),  // JSON, but no parameters: an answer
                                 std::string(R"({"name": "f", "parameters": {)"),  // unterminated
                                 std::string("{not json at all} trailing"),
                                 std::string("<|python_tag|>print(1)"),
                                 std::string("<|python"), std::string("   ")}) {
    SCOPED_TRACE(text);
    expect_stream_invariant(text, ToolFormat::llama3, Result{text, {}});
  }
}

TEST(Llama3ToolCalls, TextAfterACallIsContent) {
  expect_stream_invariant(R"({"name": "f", "parameters": {}} and then words)", ToolFormat::llama3,
                          Result{" and then words", Calls{{"f", "{}"}}});
}

TEST(Llama3ToolCalls, QwenTagsAreTextForLlama3AndJsonIsTextForQwen3) {
  const std::string tagged = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  expect_stream_invariant(tagged, ToolFormat::llama3, Result{tagged, {}});
  const std::string json = R"({"name": "f", "parameters": {}})";
  expect_stream_invariant(json, ToolFormat::qwen3, Result{json, {}});
  expect_stream_invariant(tagged, ToolFormat::none, Result{tagged, {}});
}

TEST(ToolFormat, DetectedFromTheTemplateOrNamed) {
  EXPECT_EQ(detect_tool_format("{%- if tools %}<tools>{{ tool | tojson }}</tools> <tool_call>{% endif %}"), ToolFormat::qwen3);
  EXPECT_EQ(detect_tool_format("{{- '<|python_tag|>' + tool_call.name }}<|eom_id|>"), ToolFormat::llama3);
  EXPECT_EQ(detect_tool_format("<|start_header_id|>user<|end_header_id|> Respond in the format "
                               "{\"name\": function name, \"parameters\": dictionary of argument name and its value}"),
            ToolFormat::llama3);
  EXPECT_EQ(detect_tool_format("{{ bos_token }}<|start_header_id|>{{ m.role }}<|end_header_id|>"), ToolFormat::qwen3);
  EXPECT_EQ(tool_format_from_name("llama3", "--tool-parser"), ToolFormat::llama3);
  EXPECT_EQ(tool_format_from_name("hermes", "--tool-parser"), ToolFormat::qwen3);
  EXPECT_EQ(tool_format_from_name("none", "--tool-parser"), ToolFormat::none);
  try {
    tool_format_from_name("mistral", "--tool-parser");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tool-parser"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rill::text
