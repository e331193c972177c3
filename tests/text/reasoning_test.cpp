// tests/text/reasoning_test.cpp — <think> split: whole text, every two-chunk split and
// char-by-char agree with the hand-split expectation; no tag means all reasoning until the end.
#include <gtest/gtest.h>

#include "text/reasoning.h"

namespace rill::text {
namespace {

std::pair<std::string, std::string> run(const std::vector<std::string>& chunks) {
  ReasoningSplitter s;
  std::string r, c;
  for (const std::string& ch : chunks) {
    auto o = s.push(ch);
    r += o.reasoning;
    c += o.content;
  }
  auto o = s.flush();
  return {r + o.reasoning, c + o.content};
}

TEST(ReasoningSplitter, SplitsAtCloseTag) {
  const std::string text = "<think>\nThe user wants x.\n</think>\n\nAnswer: x </think> stays";
  const std::pair<std::string, std::string> expected{"\nThe user wants x.\n", "Answer: x </think> stays"};
  EXPECT_EQ(run({text}), expected);
  for (size_t cut = 0; cut <= text.size(); ++cut) EXPECT_EQ(run({text.substr(0, cut), text.substr(cut)}), expected) << cut;
  std::vector<std::string> chars;
  for (char c : text) chars.emplace_back(1, c);
  EXPECT_EQ(run(chars), expected);
}

TEST(ReasoningSplitter, NoOpeningTag) {
  EXPECT_EQ(run({"plan</think>done"}), (std::pair<std::string, std::string>{"plan", "done"}));
}

TEST(ReasoningSplitter, UnclosedIsAllReasoning) {
  EXPECT_EQ(run({"<think>still thinking </thi"}), (std::pair<std::string, std::string>{"still thinking </thi", ""}));
}

}  // namespace
}  // namespace rill::text
