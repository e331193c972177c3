// tests/server/tool_calls_test.cpp — <tool_call> parsing: whole blocks, every split of the text
// into two chunks and char-by-char streams give the same content and calls; broken JSON and an
// unterminated block come back as plain text.
#include <gtest/gtest.h>

#include "server/tool_calls.h"

namespace rill::server {
namespace {

struct Result {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;
};

Result run(const std::vector<std::string>& chunks) {
  ToolCallParser p;
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

}  // namespace
}  // namespace rill::server
