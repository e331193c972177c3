// The KV side of the engine end to end: a request sharing a 1,000-token prefix prefills only its
// suffix (counted) and generates exactly what a cold engine generates; a KV budget too small for
// all rows preempts by recompute and still gives every request its solo tokens; cancellation in
// the middle of a prefill and of a decode frees every block; admission refuses what can never
// fit. Pool invariants are checked after every step (EngineOptions::check_invariants).
#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

TEST(PrefixCaching, SharedThousandTokenPrefixPrefillsOnlyTheSuffix) {
  Loaded m = load_fixture(long_context_model());
  std::mt19937 rng(5);
  const int32_t V = int32_t(m.model->config().vocab_size);
  const std::vector<int32_t> prefix = random_tokens(rng, 1000, V);
  auto with_suffix = [&](int32_t n) {
    std::vector<int32_t> p = prefix;
    std::vector<int32_t> s = random_tokens(rng, n, V);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  Request a = make_request(with_suffix(37), 8);
  Request b = make_request(with_suffix(21), 8, 0.9f, 31);
  Request c = make_request(with_suffix(5), 8);
  c.cache_namespace = "another tenant";
  EngineOptions o = small_options(size_t(64) << 20);
  o.max_num_batched_tokens = 512;  // the 1,000-token prefix takes several chunks
  EngineCore core(*m.model, o);
  RequestResult ra = run_core(core, {a})[0];
  EXPECT_EQ(ra.cached_tokens, 0);
  const int64_t computed_before = core.stats().computed_tokens;
  RequestResult rb = run_core(core, {b})[0];
  // 1,000 shared tokens = 62 full blocks of 16 (992 tokens); the rest of b is computed.
  EXPECT_EQ(rb.cached_tokens, 992);
  const int64_t computed_b = core.stats().computed_tokens - computed_before;
  EXPECT_EQ(computed_b, int64_t(b.prompt.size()) - 992 + int64_t(rb.tokens[0].size()) - 1);
  EXPECT_EQ(core.stats().prefix_hit_tokens, 992);
  // Another namespace never matches.
  RequestResult rc = run_core(core, {c})[0];
  EXPECT_EQ(rc.cached_tokens, 0);
  // Identical outputs to cold runs (no prefix cache at all).
  std::vector<RequestResult> cold = run_alone(*m.model, {a, b, c}, size_t(64) << 20);
  EXPECT_EQ(ra.tokens, cold[0].tokens);
  EXPECT_EQ(rb.tokens, cold[1].tokens);
  EXPECT_EQ(rc.tokens, cold[2].tokens);
  // The cached blocks are free (evictable), not leaked.
  EXPECT_EQ(core.kv_cache().pool().num_used(), 0);
  EXPECT_GE(core.kv_cache().pool().num_evictable(), 62);
}

TEST(Preemption, TinyKvBudgetStillGivesSoloOutputs) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::vector<Request> requests = mixed_requests(16, 1000, 77, 60);
  const std::vector<RequestResult> alone = run_alone(*m.model, requests);
  // 8 blocks of 16 tokens: every request fits alone (<= 100 tokens = 7 blocks), few fit together.
  const size_t block_bytes = m.model->kv_spec().bytes_per_block(16);
  for (bool prefix : {false, true}) {
    EngineOptions o = small_options(8 * block_bytes);
    o.prefix_caching = prefix;
    o.max_num_batched_tokens = 64;
    EngineCore core(*m.model, o);
    ASSERT_EQ(core.kv_cache().num_blocks(), 8);
    expect_same_tokens(run_core(core, requests), alone, prefix ? "preempted, prefix cache" : "preempted");
    EXPECT_GT(core.stats().num_preemptions, 0);
  }
}

TEST(Cancellation, MidPrefillAndMidDecodeFreeEverything) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::mt19937 rng(8);
  EngineOptions o = small_options();
  o.max_num_batched_tokens = 32;
  EngineCore core(*m.model, o);
  Request longp = make_request(random_tokens(rng, 200, 1000), 20);
  Request other = make_request(random_tokens(rng, 30, 1000), 12, 0.7f, 5);
  auto h1 = std::make_shared<RequestStream>(1001), h2 = std::make_shared<RequestStream>(1002);
  core.add(longp, h1, Clock::now());
  core.add(other, h2, Clock::now());
  ASSERT_TRUE(core.step());
  ASSERT_TRUE(core.step());
  EXPECT_GT(core.kv_cache().pool().num_used(), 0);
  EXPECT_FALSE(h1->try_next().has_value());  // still prefilling: no token yet
  core.cancel(1001);
  core.check_invariants();
  RequestResult r1 = collect(*h1);
  EXPECT_TRUE(r1.tokens.empty() || r1.tokens[0].empty());
  EXPECT_EQ(r1.finish[0], FinishReason::cancelled);
  // Mid-decode: let `other` produce a few tokens, then cancel it.
  while (core.step()) {
    if (auto e = h2->try_next()) {
      core.cancel(1002);
      break;
    }
  }
  core.check_invariants();
  EXPECT_FALSE(core.has_work());
  EXPECT_EQ(core.kv_cache().pool().num_used(), 0);
  RequestResult r2 = collect(*h2);
  EXPECT_EQ(r2.finish[0], FinishReason::cancelled);
  EXPECT_EQ(core.stats().requests_cancelled, 2);
  // The engine keeps working afterwards.
  RequestResult again = run_core(core, {other})[0];
  EXPECT_EQ(again.tokens, run_alone(*m.model, {other})[0].tokens);
}

TEST(Admission, RefusesWhatCanNeverFitAndRejectsBadInput) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");  // context 256
  const size_t block_bytes = m.model->kv_spec().bytes_per_block(16);
  EngineCore core(*m.model, small_options(10 * block_bytes));  // 160 tokens of KV
  std::string why;
  EXPECT_EQ(core.admissible(make_request(std::vector<int32_t>(200, 5), 57), why), RejectReason::too_long);
  EXPECT_NE(why.find("context of 256"), std::string::npos) << why;
  EXPECT_EQ(core.admissible(make_request(std::vector<int32_t>(150, 5), 20), why), RejectReason::too_long);
  EXPECT_NE(why.find("holds 10"), std::string::npos) << why;
  EXPECT_EQ(core.admissible(make_request(std::vector<int32_t>(150, 5), 10), why), RejectReason::none);
  auto bad = [&](auto edit, const std::string& field) {
    Request r = make_request({1, 2, 3}, 4);
    edit(r);
    try {
      core.validate(r);
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  bad([](Request& r) { r.prompt.clear(); }, "prompt");
  bad([](Request& r) { r.prompt[1] = 1000; }, "prompt[1]");
  bad([](Request& r) { r.max_tokens = 0; }, "max_tokens");
  bad([](Request& r) { r.sampling.top_p = 0.f; }, "top_p");
  bad([](Request& r) { r.sampling.temperature = -1.f; }, "temperature");
  bad([](Request& r) { r.sampling.top_logprobs = 21; }, "top_logprobs");
  bad([](Request& r) { r.sampling.logit_bias = {{-1, 1.f}}; }, "logit_bias");
  bad([](Request& r) { r.stop_token_ids = {5000}; }, "stop_token_ids");
  bad([](Request& r) { r.sampling.n = 0; }, "n:");
}

}  // namespace
}  // namespace rill
