// tests/server/stop_matcher_test.cpp — stop strings across chunk boundaries, held-back text, and
// a brute-force oracle (the text before the earliest occurrence in the whole concatenation).
#include <gtest/gtest.h>

#include <random>

#include "server/stop_matcher.h"

namespace rill::server {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& chunks) {
  std::string out;
  for (const std::string& c : chunks) out += m.push(c);
  return out + m.flush();
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m;
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, MatchAcrossChunksIsNotEmitted) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("hello E"), "hello ");  // "E" may start END: held back
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("D and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");
  EXPECT_EQ(m.push("x"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("EN"), "");
  EXPECT_EQ(m.push("X"), "ENX");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, HeldTextIsFlushedAtTheEnd) {
  StopMatcher m({"</s>"});
  EXPECT_EQ(m.push("a</"), "a");
  EXPECT_EQ(m.flush(), "</");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"bc", "abcd", "x"});
  EXPECT_EQ(feed(m, {"zab", "cd"}), "z");  // "abcd" starts before "bc" in "zabcd"
  EXPECT_EQ(m.matched(), "abcd");
}

TEST(StopMatcher, MultibyteStopStrings) {
  StopMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(feed(m, {"un \xC3\xA9", "t", "\xC3\xA9 chaud"}), "un ");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, RandomChunkingMatchesOracle) {
  std::mt19937 rng(7);
  const std::vector<std::string> stops = {"ab", "bba", "cab"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int len = int(rng() % 20);
    for (int i = 0; i < len; ++i) text += char('a' + rng() % 3);
    size_t earliest = std::string::npos;
    for (const std::string& s : stops) earliest = std::min(earliest, text.find(s));
    const std::string expected = earliest == std::string::npos ? text : text.substr(0, earliest);
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size();) {
      size_t n = 1 + rng() % 4;
      chunks.push_back(text.substr(i, n));
      i += n;
    }
    StopMatcher m(stops);
    EXPECT_EQ(feed(m, chunks), expected) << text;
    EXPECT_EQ(m.stopped(), earliest != std::string::npos) << text;
  }
}

}  // namespace
}  // namespace rill::server
