// The step arena holds whatever a step needs, including wide block tables: a decode step of
// 64 rows whose tables span 81 one-token blocks each, right after short prefills, must run and
// give each row the logits it gets alone.
#include <gtest/gtest.h>

#include <cstring>

#include "common/model_runner.h"

namespace rill {
namespace {
using test::Runner;
using test::Seq;

TEST(StepArena, WideBlockTablesInADecodeStep) {
  Runner run("qwen3-tiny", std::nullopt, /*block_size=*/1, false, /*num_blocks=*/64 * 82 + 82);
  std::vector<Seq> seqs(64);
  for (size_t r = 0; r < seqs.size(); ++r) {
    std::vector<int32_t> prompt(80);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((r * 31 + i * 7) % 1000);
    run.step({{&seqs[r], prompt, Logits::none}});
  }
  std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> rows;
  for (size_t r = 0; r < seqs.size(); ++r) rows.emplace_back(&seqs[r], std::vector<int32_t>{int32_t(r + 3)}, Logits::last);
  std::vector<float> batched = run.step(rows);
  ASSERT_EQ(batched.size(), 64 * size_t(run.vocab()));
  // Row 5 alone, from scratch, must give the same logits.
  Runner alone("qwen3-tiny", std::nullopt, 1, false, 82);
  Seq s;
  std::vector<int32_t> prompt(80);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((5 * 31 + i * 7) % 1000);
  alone.step({{&s, prompt, Logits::none}});
  std::vector<float> one = alone.step({{&s, {8}, Logits::last}});
  EXPECT_EQ(0, std::memcmp(one.data(), batched.data() + 5 * size_t(run.vocab()), one.size() * sizeof(float)));
}

}  // namespace
}  // namespace rill
