// EngineCore with the hybrid Qwen3.5 fixtures (CPU): recurrent-state slots next to the KV blocks,
// and prefix-cache hits through state snapshots. Rows alone vs together, greedy equal to the
// transformers reference, a multi-turn conversation that reuses its prefix (prefilled-token counts
// asserted) with the tokens of a cold run, preemption under a tight KV and slot budget, cancellation
// mid-prefill and mid-decode, the snapshot byte bound (LRU) and snapshots dropped with their
// blocks. KV, state-slot and snapshot invariants are checked after every step.
#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

constexpr int32_t kVocab = 1000;

// Small caches with every hybrid feature on; snapshots every `interval` blocks of 16 tokens.
EngineOptions hybrid_options(int32_t interval = 2) {
  EngineOptions o = small_options(size_t(4) << 20);
  o.max_num_batched_tokens = 64;
  o.snapshot_interval_blocks = interval;
  o.max_state_slots = 8;
  return o;
}

// 12 KV blocks (192 tokens), 3 state slots, 4 snapshots, chunks of 48 tokens: sequences get preempted.
EngineOptions tight_hybrid_options(Model& model) {
  EngineOptions o = hybrid_options(2);
  const size_t block_bytes = model.kv_spec().bytes_per_block(16);
  o.state_snapshot_bytes = 4 * model.state_bytes_per_sequence();
  o.kv_memory_bytes = 12 * block_bytes + o.state_snapshot_bytes;
  o.max_state_slots = 3;
  o.max_num_batched_tokens = 48;
  return o;
}

void expect_no_state_held(EngineCore& core) {
  EXPECT_EQ(core.state_pool().num_free(), core.state_pool().num_slots()) << "state slots leaked";
  EXPECT_EQ(core.kv_cache().pool().num_used(), 0) << "blocks leaked";
}

class HybridEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridEngine, GreedyMatchesTransformers) {
  Loaded m = load_fixture(kFixtures + GetParam());
  const Reference ref = load_reference(GetParam());
  std::vector<Request> requests;
  for (auto& p : ref.prompts) requests.push_back(make_request(p, int32_t(ref.greedy[0].size())));
  EngineCore core(*m.model, hybrid_options());
  ASSERT_TRUE(core.state_pool().enabled());
  std::vector<RequestResult> got = run_core(core, requests);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].tokens[0], ref.greedy[i]) << "prompt " << i;
  expect_no_state_held(core);
}

TEST_P(HybridEngine, RowsTogetherEqualAlone) {
  Loaded m = load_fixture(kFixtures + GetParam());
  std::vector<Request> requests = mixed_requests(12, kVocab, 5, 90);
  requests[2].sampling.n = 3;  // forks: the children copy the parent's state slot
  requests[2].sampling.temperature = 0.9f;
  requests[2].sampling.seed = 99;
  const std::vector<RequestResult> alone = run_alone(*m.model, requests);
  EngineCore core(*m.model, hybrid_options());
  const std::vector<RequestResult> together = run_core(core, requests);
  expect_same_tokens(together, alone, "together");
  ASSERT_EQ(together[2].tokens.size(), 3u);
  EXPECT_NE(together[2].tokens[0], together[2].tokens[1]);
  expect_no_state_held(core);
  // Some snapshots were kept on the way (prompts over 32 tokens cross a boundary).
  EXPECT_GT(core.stats().state_snapshots_saved, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridEngine, ::testing::Values("qwen35-tiny", "qwen35-vlm-tied", "qwen35-moe-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// Turn k + 1 = prompt k + generated k + new text. The prefix is served from the cache (KV blocks
// plus the state snapshot of the same boundary), only the rest is prefilled, and the tokens equal
// those of a cold run.
TEST(HybridEnginePrefix, MultiTurnReusesThePrefix) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  std::mt19937 rng(11);
  EngineCore core(*m.model, hybrid_options(2));  // snapshots every 32 tokens, and at prompt ends
  // Turn 1: 40 prompt tokens, 40 generated. Snapshots: 32 (prompt boundary, also the interval) in
  // prefill, 64 during decode.
  Request t1 = make_request(random_tokens(rng, 40, kVocab), 40);
  RequestResult r1 = run_core(core, {t1})[0];
  EXPECT_EQ(r1.cached_tokens, 0);
  EXPECT_EQ(core.snapshots().count(), 2);
  // Turn 2: 80 tokens of turn 1 + 20 new. KV matches 4 full blocks (64 computed tokens), and the
  // decode-time snapshot at 64 exists, so 36 tokens are prefilled.
  Request t2 = t1;
  t2.prompt.insert(t2.prompt.end(), r1.tokens[0].begin(), r1.tokens[0].end());
  const std::vector<int32_t> user = random_tokens(rng, 20, kVocab);
  t2.prompt.insert(t2.prompt.end(), user.begin(), user.end());
  t2.max_tokens = 12;
  const int64_t computed_before = core.stats().computed_tokens;
  RequestResult r2 = run_core(core, {t2})[0];
  EXPECT_EQ(r2.cached_tokens, 64);
  EXPECT_EQ(core.stats().computed_tokens - computed_before, (100 - 64) + (12 - 1)) << "prefilled more than the rest";
  // Turn 3 extends turn 2: 100 + 12 + 9 tokens; its prompt-end snapshot (96, the last boundary
  // before token 100) is the longest restorable prefix.
  Request t3 = t2;
  t3.prompt.insert(t3.prompt.end(), r2.tokens[0].begin(), r2.tokens[0].end());
  const std::vector<int32_t> user3 = random_tokens(rng, 9, kVocab);
  t3.prompt.insert(t3.prompt.end(), user3.begin(), user3.end());
  t3.max_tokens = 10;
  RequestResult r3 = run_core(core, {t3})[0];
  EXPECT_EQ(r3.cached_tokens, 96);
  // Cold runs (no prefix cache) give the same tokens.
  const std::vector<RequestResult> cold = run_alone(*m.model, {t1, t2, t3});
  EXPECT_EQ(r1.tokens, cold[0].tokens);
  EXPECT_EQ(r2.tokens, cold[1].tokens);
  EXPECT_EQ(r3.tokens, cold[2].tokens);
  // The same prompt again: served up to its last boundary with a snapshot.
  RequestResult again = run_core(core, {t3})[0];
  EXPECT_EQ(again.tokens, r3.tokens);
  EXPECT_GE(again.cached_tokens, 96);
  expect_no_state_held(core);
}

// Few KV blocks and state slots: sequences are preempted (and restored from snapshots or
// recomputed), outputs are unchanged and nothing leaks.
TEST(HybridEnginePrefix, PreemptionUnderTightBudgetsKeepsOutputs) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  const std::vector<Request> requests = mixed_requests(10, kVocab, 21, 100);
  const std::vector<RequestResult> alone = run_alone(*m.model, requests);
  EngineOptions o = tight_hybrid_options(*m.model);
  EngineCore core(*m.model, o);
  EXPECT_EQ(core.kv_cache().num_blocks(), 12);
  EXPECT_EQ(core.state_pool().num_slots(), 3);
  expect_same_tokens(run_core(core, requests), alone, "tight budgets");
  EXPECT_GT(core.stats().num_preemptions, 0);
  EXPECT_LE(core.stats().state_snapshots, 4);
  expect_no_state_held(core);
}

// Prompt logprobs on a hybrid model: the same scores (and tokens) as one-step runs alone when the
// prompts run in chunks cut at snapshot boundaries and by a small scoring budget, under preemption,
// and again once their prefixes are cached (a scoring request restores no snapshot below its first
// unscored token).
TEST(HybridEnginePrefix, PromptLogprobsUnderChunksPreemptionAndCachedPrefixes) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  std::vector<Request> requests = mixed_requests(10, kVocab, 23, 100);
  for (size_t i = 0; i < requests.size(); i += 2) requests[i].sampling.prompt_logprobs = 1;
  const std::vector<RequestResult> alone = run_alone(*m.model, requests);
  auto expect_same_scores = [&](const std::vector<RequestResult>& got, const std::string& what) {
    expect_same_tokens(got, alone, what);
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t want = i % 2 == 0 ? requests[i].prompt.size() - 1 : 0;
      ASSERT_EQ(got[i].prompt_logprobs.size(), want) << what << ": request " << i;
      ASSERT_EQ(alone[i].prompt_logprobs.size(), want) << what << ": request " << i;
      for (size_t t = 0; t < want; ++t) {
        // Chunked and one-step prefill agree to f32 rounding here, not bit for bit (the Gated DeltaNet's
        // chunked and recurrent forms, DeltaRuleForm): up to 4e-5 seen; a wrong position is off by ~1.
        EXPECT_NEAR(got[i].prompt_logprobs[t].logprob, alone[i].prompt_logprobs[t].logprob, 2e-4)
            << what << ": request " << i << ", prompt token " << t + 1;
        const auto& a = got[i].prompt_logprobs[t].top_logprobs;
        const auto& b = alone[i].prompt_logprobs[t].top_logprobs;
        ASSERT_EQ(a.size(), 1u) << what;
        ASSERT_EQ(b.size(), 1u) << what;
        EXPECT_EQ(a[0].first, b[0].first) << what << ": request " << i << ", prompt token " << t + 1;
        EXPECT_NEAR(a[0].second, b[0].second, 2e-4) << what << ": request " << i << ", prompt token " << t + 1;
      }
    }
  };
  EngineOptions o = tight_hybrid_options(*m.model);
  o.max_scored_tokens = 20;
  {
    EngineCore core(*m.model, o);
    expect_same_scores(run_core(core, requests), "tight budgets");
    EXPECT_GT(core.stats().num_preemptions, 0);
    expect_no_state_held(core);
  }
  EngineCore core(*m.model, hybrid_options());
  expect_same_scores(run_core(core, requests), "first pass");
  expect_same_scores(run_core(core, requests), "cached prefixes");
  expect_no_state_held(core);
}

TEST(HybridEnginePrefix, CancelMidPrefillAndMidDecodeFreesSlotsAndBlocks) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  std::mt19937 rng(4);
  EngineOptions o = hybrid_options(2);
  o.max_num_batched_tokens = 32;
  EngineCore core(*m.model, o);
  auto a = std::make_shared<RequestStream>(9001), b = std::make_shared<RequestStream>(9002);
  core.add(make_request(random_tokens(rng, 10, kVocab), 50), b, Clock::now());
  core.add(make_request(random_tokens(rng, 150, kVocab), 20), a, Clock::now());
  ASSERT_TRUE(core.step());
  ASSERT_TRUE(core.step());
  EXPECT_EQ(core.stats().state_slots_used, 2);
  core.cancel(9001);  // 150-token prompt, mid-prefill
  core.check_invariants();
  EXPECT_EQ(core.stats().state_slots_used, 1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(core.step());
  core.cancel(9002);  // decoding
  core.check_invariants();
  EXPECT_FALSE(core.has_work());
  EXPECT_EQ(collect(*a).finish[0], FinishReason::cancelled);
  RequestResult rb = collect(*b);
  EXPECT_EQ(rb.finish.back(), FinishReason::cancelled);
  EXPECT_GT(rb.tokens[0].size(), 0u);
  expect_no_state_held(core);
}

// The snapshot budget holds 3 snapshots: more prompts evict the least recently used; and a
// snapshot goes with its prefix's KV block (never restored without it).
TEST(HybridEnginePrefix, SnapshotBudgetAndEvictionWithTheirBlocks) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  std::mt19937 rng(8);
  EngineOptions o = hybrid_options(2);
  o.state_snapshot_bytes = 3 * m.model->state_bytes_per_sequence() + 100;
  EngineCore core(*m.model, o);
  EXPECT_EQ(core.snapshots().capacity(), 3);
  std::vector<Request> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(make_request(random_tokens(rng, 70, kVocab), 3));
  std::vector<RequestResult> first;
  for (const Request& r : prompts) {
    first.push_back(run_core(core, {r})[0]);
    EXPECT_LE(core.snapshots().count(), 3);
    EXPECT_LE(core.stats().state_snapshot_bytes, int64_t(o.state_snapshot_bytes));
  }
  EXPECT_GT(core.stats().state_snapshots_evicted, 0);
  // The last prompt's snapshots (32, 64) are the most recent: a repeat is served from 64.
  RequestResult last = run_core(core, {prompts[4]})[0];
  EXPECT_EQ(last.cached_tokens, 64);
  EXPECT_EQ(last.tokens, first[4].tokens);
  // The first prompt's snapshots were evicted: its KV blocks alone are not enough.
  RequestResult evicted = run_core(core, {prompts[0]})[0];
  EXPECT_EQ(evicted.cached_tokens, 0);
  EXPECT_EQ(evicted.tokens, first[0].tokens);
  // Dropping the prefix cache drops every snapshot with it.
  core.kv_cache().clear_prefix_cache();
  ASSERT_GT(core.snapshots().count(), 0);
  RequestResult cleared = run_core(core, {prompts[4]})[0];
  EXPECT_EQ(cleared.cached_tokens, 0);
  EXPECT_EQ(cleared.tokens, first[4].tokens);
  expect_no_state_held(core);
}

// A KV budget so small that blocks are evicted while snapshots remain within their own budget:
// each evicted block takes its snapshot along (checked after every step by check_invariants).
TEST(HybridEnginePrefix, EvictedBlocksTakeTheirSnapshots) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  std::mt19937 rng(12);
  EngineOptions o = hybrid_options(1);
  o.state_snapshot_bytes = 64 * m.model->state_bytes_per_sequence();
  o.kv_memory_bytes = 10 * m.model->kv_spec().bytes_per_block(16) + o.state_snapshot_bytes;
  EngineCore core(*m.model, o);
  Request a = make_request(random_tokens(rng, 60, kVocab), 4);
  RequestResult ra = run_core(core, {a})[0];
  const int32_t saved = core.snapshots().count();
  EXPECT_GE(saved, 3);
  // Another 120-token prompt needs more blocks than are free: a's cached blocks are evicted.
  run_core(core, {make_request(random_tokens(rng, 120, kVocab), 4)});
  RequestResult again = run_core(core, {a})[0];
  EXPECT_LT(again.cached_tokens, 48);
  EXPECT_EQ(again.tokens, ra.tokens);
  expect_no_state_held(core);
}

// Everything at once: prompts sharing a system prefix (restores from snapshots), forks, seeded
// sampling, few blocks, slots and snapshots (preemption, block and snapshot eviction); every
// request's tokens equal its cold run alone.
TEST(HybridEnginePrefix, SharedPrefixesUnderPressureEqualAlone) {
  Loaded m = load_fixture(kFixtures + "qwen35-moe-tiny");
  std::mt19937 rng(31);
  const std::vector<int32_t> system = random_tokens(rng, 50, kVocab);
  std::vector<Request> requests;
  for (int i = 0; i < 16; ++i) {
    Request r = make_request(system, 6 + i % 13, i % 3 ? 0.7f : 0.f, 500 + uint64_t(i));
    const std::vector<int32_t> user = random_tokens(rng, 1 + int32_t(rng() % 40u), kVocab);
    r.prompt.insert(r.prompt.end(), user.begin(), user.end());
    if (i % 5 == 4) r.sampling.n = 2;
    requests.push_back(std::move(r));
  }
  const std::vector<RequestResult> alone = run_alone(*m.model, requests);
  EngineOptions o = hybrid_options(1);
  o.state_snapshot_bytes = 5 * m.model->state_bytes_per_sequence();
  o.kv_memory_bytes = 12 * m.model->kv_spec().bytes_per_block(16) + o.state_snapshot_bytes;
  o.max_state_slots = 4;
  o.max_num_batched_tokens = 40;
  EngineCore core(*m.model, o);
  const std::vector<RequestResult> got = run_core(core, requests);
  expect_same_tokens(got, alone, "under pressure");
  const EngineStats s = core.stats();
  EXPECT_GT(s.prefix_hit_tokens, 0);
  EXPECT_GT(s.state_snapshots_evicted, 0);
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_LE(s.state_snapshots, 5);
  std::printf("[hybrid] pressure: %lld prefix-hit tokens, %lld preemptions, %lld snapshots saved, %lld evicted\n",
              (long long)s.prefix_hit_tokens, (long long)s.num_preemptions, (long long)s.state_snapshots_saved,
              (long long)s.state_snapshots_evicted);
  expect_no_state_held(core);
}

TEST(HybridEnginePrefix, TooManySequencesForTheSlotsAreRefused) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  EngineOptions o = hybrid_options();
  o.max_state_slots = 2;
  EngineCore core(*m.model, o);
  Request r = make_request({1, 2, 3}, 4);
  r.sampling.n = 3;
  std::string why;
  EXPECT_EQ(core.admissible(r, why), RejectReason::too_long);
  EXPECT_NE(why.find("state slots"), std::string::npos) << why;
}

}  // namespace
}  // namespace rill
