// Speculative decoding (engine/spec/, EngineCore): the n-gram draft source's lookup, and the
// engine's promise that drafts change how many steps a generation takes, never what it generates —
// tokens, logprobs and finish reasons equal decoding without drafts bit for bit, with drafts that
// are all right, all wrong, wrong from a given position, or the n-gram lookup's; under KV pressure
// with prefix caching (rolled-back drafts leave nothing in the cache), stop tokens inside the
// drafts, max_tokens and the context's end, n > 1 and prompt logprobs.
#include "engine/spec/ngram.h"
#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

std::vector<int32_t> propose(NgramOptions o, std::vector<int32_t> context, int32_t max_drafts) {
  NgramDraftSource source(o);
  std::vector<int32_t> out;
  source.propose(context, max_drafts, out);
  return out;
}

TEST(NgramDraftSource, TheLongestSuffixMatchAtItsLatestOccurrence) {
  // [1 2 3] occurred twice before the end; the later occurrence's continuation is drafted.
  EXPECT_EQ(propose({2, 4}, {1, 2, 3, 9, 1, 2, 3, 4, 5, 1, 2, 3}, 3), (std::vector<int32_t>{4, 5, 1}));
  // A later match of one token loses to an earlier one of three.
  EXPECT_EQ(propose({1, 4}, {7, 1, 2, 8, 2, 7, 1, 2}, 3), (std::vector<int32_t>{8, 2, 7}));
  // Where the continuation reaches the context's end, the repeat goes on: a cycle of two, a run of one.
  EXPECT_EQ(propose({1, 4}, {5, 6, 5, 6, 5}, 5), (std::vector<int32_t>{6, 5, 6, 5, 6}));
  EXPECT_EQ(propose({2, 4}, {9, 7, 7, 7}, 3), (std::vector<int32_t>{7, 7, 7}));
  EXPECT_EQ(propose({2, 4}, {1, 2, 3, 1, 2}, 4), (std::vector<int32_t>{3, 1, 2, 3}));
  // max_n caps the match's length: both matches count as 2, the later one wins.
  EXPECT_EQ(propose({1, 2}, {1, 2, 8, 1, 2, 9, 1, 2}, 2), (std::vector<int32_t>{9, 1}));
}

TEST(NgramDraftSource, NoDraftsWithoutAMatchOfMinTokens) {
  EXPECT_TRUE(propose({1, 4}, {1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(propose({2, 4}, {1, 2, 3, 1}, 4).empty());  // only the last token recurs
  EXPECT_EQ(propose({1, 4}, {1, 2, 3, 1}, 4), (std::vector<int32_t>{2, 3, 1, 2}));
  EXPECT_TRUE(propose({1, 4}, {1, 2, 1}, 0).empty());
  EXPECT_TRUE(propose({1, 4}, {1}, 4).empty());
}

TEST(NgramDraftSource, BadOptionsAreRefusedNamingTheField) {
  auto message = [](NgramOptions o) {
    try {
      NgramDraftSource s(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({0, 4}).find("ngram min"), std::string::npos);
  EXPECT_NE(message({3, 2}).find("ngram max"), std::string::npos);
}

EngineOptions spec_options(std::shared_ptr<DraftSource> source, int32_t tokens = 4) {
  EngineOptions o = small_options();
  o.speculative_tokens = tokens;
  o.draft_source = std::move(source);
  return o;
}

class SpecDecode : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = load_fixture(kFixtures + "qwen3-tiny");
    vocab_ = int32_t(m_.model->config().vocab_size);
  }
  std::vector<RequestResult> plain(const std::vector<Request>& requests) {
    EngineCore core(*m_.model, small_options());
    return run_core(core, requests);
  }
  Loaded m_;
  int32_t vocab_ = 0;
};

TEST_F(SpecDecode, NgramDraftsGiveTheTokensOfPlainDecoding) {
  const std::vector<Request> requests = repetitive_requests(12, vocab_, 11, 48);
  const std::vector<RequestResult> want = plain(requests);
  for (int32_t k : {1, 3, 8}) {
    EngineOptions o = small_options();
    o.speculative_tokens = k;
    o.ngram = {1, 4};
    EngineCore core(*m_.model, o);
    expect_identical(run_core(core, requests), want, "n-gram drafts, k = " + std::to_string(k));
    const EngineStats s = core.stats();
    EXPECT_GT(s.spec_drafted_tokens, 0) << "k = " << k;
    EXPECT_GT(s.spec_accepted_tokens, 0) << "k = " << k;
    EXPECT_LE(s.spec_accepted_tokens, s.spec_drafted_tokens);
  }
}

TEST_F(SpecDecode, OverlappedStepsAboveTheRunningLimitDraftOnceFewerRun) {
  // 12 requests of different lengths with drafts allowed from 3 running sequences down: the first
  // steps overlap (pending tokens, no drafts), the last ones draft.
  std::vector<Request> requests = repetitive_requests(12, vocab_, 13, 20);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].max_tokens = 10 + 6 * int32_t(i);
  const std::vector<RequestResult> want = plain(requests);
  EngineOptions o = spec_options(std::make_shared<OracleDrafts>(full_sequences(requests, want), vocab_), 4);
  o.speculative_max_running = 3;
  EngineCore core(*m_.model, o);
  ASSERT_TRUE(core.overlaps_steps());
  expect_identical(run_core(core, requests), want, "overlapped, then drafting");
  const EngineStats s = core.stats();
  EXPECT_GT(s.steps_overlapped, 0);
  EXPECT_GT(s.spec_drafted_tokens, 0);
  EXPECT_EQ(s.spec_accepted_tokens, s.spec_drafted_tokens);
}

TEST_F(SpecDecode, OracleDraftsAreKeptAndWrongOnesRolledBack) {
  std::vector<Request> requests = repetitive_requests(8, vocab_, 5, 40);
  requests[2].max_tokens = 1;  // no room for a draft
  requests[3].max_tokens = 2;
  const std::vector<RequestResult> want = plain(requests);
  const auto full = full_sequences(requests, want);
  int64_t plain_steps = 0;
  {
    EngineCore core(*m_.model, small_options());
    run_core(core, requests);
    plain_steps = core.stats().num_steps;
  }
  {  // All right: every draft is kept, and a step makes up to 5 tokens a sequence.
    auto oracle = std::make_shared<OracleDrafts>(full, vocab_);
    EngineCore core(*m_.model, spec_options(oracle));
    expect_identical(run_core(core, requests), want, "right drafts");
    const EngineStats s = core.stats();
    EXPECT_GT(s.spec_drafted_tokens, 100);
    EXPECT_EQ(s.spec_accepted_tokens, s.spec_drafted_tokens);
    EXPECT_LT(s.num_steps * 3, plain_steps) << "right drafts should save most steps";
  }
  for (int32_t bad : {0, 1, 3}) {  // wrong from draft `bad` on: exactly `bad` kept a row
    auto oracle = std::make_shared<OracleDrafts>(full, vocab_, bad);
    EngineCore core(*m_.model, spec_options(oracle));
    expect_identical(run_core(core, requests), want, "drafts wrong at " + std::to_string(bad));
    const EngineStats s = core.stats();
    EXPECT_GT(s.spec_verify_rows, 0);
    EXPECT_LE(s.spec_accepted_tokens, s.spec_verify_rows * bad);
    if (bad == 0) {
      EXPECT_EQ(s.spec_accepted_tokens, 0);
    }
  }
}

// Everything at once, with drafts of random lengths that go wrong at random places: 24 requests
// (greedy, seeded, penalised, n = 2, stop tokens), prompt chunks of 40 tokens, a KV cache small
// enough to preempt, prefix caching, overlapped steps above 6 running sequences.
class SpecDecodeRandom : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecDecodeRandom, RandomDraftsUnderChunksPreemptionAndForks) {
  Loaded m = load_fixture(kFixtures + GetParam());
  const int32_t vocab = int32_t(m.model->config().vocab_size);
  std::vector<Request> requests = mixed_requests(16, vocab, 77, 90);
  for (Request& r : repetitive_requests(8, vocab, 78, 36)) requests.push_back(r);
  requests[3].sampling.n = 2;
  requests[3].sampling.temperature = 0.9f;
  requests[3].sampling.seed = 5;
  requests[20].sampling.n = 2;
  EngineOptions o = small_options(size_t(28) * m.model->kv_spec().bytes_per_block(16));
  o.max_num_batched_tokens = 40;
  o.snapshot_interval_blocks = 2;  // hybrid: snapshots every 32 tokens
  std::vector<RequestResult> want;
  {
    EngineCore core(*m.model, o);
    want = run_core(core, requests);
  }
  for (size_t i = 0; i < requests.size(); i += 5)  // stops at the token the free run made 4th
    if (want[i].tokens[0].size() > 4) requests[i].stop_token_ids = {want[i].tokens[0][3]};
  {
    EngineCore core(*m.model, o);
    want = run_core(core, requests);
    EXPECT_GT(core.stats().num_preemptions, 0) << "the cache should be small enough to preempt";
  }
  for (uint32_t seed : {1u, 2u, 3u}) {
    EngineOptions s = o;
    s.speculative_tokens = 6;
    s.speculative_max_running = 6;
    s.draft_source = std::make_shared<OracleDrafts>(full_sequences(requests, want), vocab, -1, false, seed);
    EngineCore core(*m.model, s);
    // The hybrid model's prompts are cut into other chunks than in the plain run (drafts take some of
    // a step's token budget), and its Gated DeltaNet computes rows over 16 tokens in chunked form,
    // which agrees with the token-by-token form to f32 rounding (up to 4e-5 seen): its logprobs are
    // compared to 2e-4 (a wrong position or state would be off by ~1), its tokens exactly.
    const bool hybrid = m.model->state_bytes_per_sequence() > 0;
    expect_identical(run_core(core, requests), want, GetParam() + ", random drafts, seed " + std::to_string(seed),
                     hybrid ? 2e-4 : 0);
    const EngineStats st = core.stats();
    EXPECT_GT(st.spec_accepted_tokens, 0);
    EXPECT_LT(st.spec_accepted_tokens, st.spec_drafted_tokens);
    EXPECT_GT(st.num_preemptions, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SpecDecodeRandom, ::testing::Values("qwen3-tiny", "qwen35-tiny"));

TEST_F(SpecDecode, RolledBackDraftsLeaveNothingInThePrefixCacheUnderKvPressure) {
  // Long generations on a KV cache of 40 blocks: preemption and eviction happen, and every step's
  // drafts are wrong. The same requests again in the same engine hit their cached prefixes (prompt
  // and output blocks), which must hold what plain decoding computed.
  std::vector<Request> requests = repetitive_requests(6, vocab_, 9, 60);
  const std::vector<RequestResult> want = plain(requests);
  auto garbage = std::make_shared<OracleDrafts>(full_sequences(requests, want), vocab_, -1, true);
  EngineOptions o = spec_options(garbage, 6);
  o.kv_memory_bytes = 40 * m_.model->kv_spec().bytes_per_block(16);
  EngineCore core(*m_.model, o);
  expect_identical(run_core(core, requests), want, "wrong drafts, first pass");
  EXPECT_EQ(core.stats().spec_accepted_tokens, 0);
  EXPECT_GT(core.stats().spec_drafted_tokens, 0);
  // Second pass: each prompt extended by its first 30 generated tokens, served from the cache.
  std::vector<Request> again = requests;
  std::vector<RequestResult> want_again;
  for (size_t i = 0; i < again.size(); ++i) {
    again[i].prompt.insert(again[i].prompt.end(), want[i].tokens[0].begin(), want[i].tokens[0].begin() + 30);
    again[i].max_tokens = 30;
    again[i].sampling.seed.reset();  // greedy rows only below: the output index moved
  }
  std::vector<Request> greedy;
  for (size_t i = 0; i < again.size(); i += 2) greedy.push_back(again[i]);
  const std::vector<RequestResult> want_greedy = plain(greedy);
  expect_identical(run_core(core, greedy), want_greedy, "after rolled-back drafts, from the prefix cache");
  EXPECT_GT(core.stats().prefix_hit_tokens, 0);
}

TEST_F(SpecDecode, StopTokensInsideTheDraftsEndTheSequenceThere) {
  std::vector<Request> requests = repetitive_requests(6, vocab_, 21, 40);
  std::vector<RequestResult> free_run = plain(requests);
  // Each request stops at the token it generated 6th (or earlier, where that token came before).
  for (size_t i = 0; i < requests.size(); ++i) requests[i].stop_token_ids = {free_run[i].tokens[0][5]};
  const std::vector<RequestResult> want = plain(requests);
  auto oracle = std::make_shared<OracleDrafts>(full_sequences(requests, free_run), vocab_);
  EngineCore core(*m_.model, spec_options(oracle, 8));
  expect_identical(run_core(core, requests), want, "stop inside drafts");
  for (const RequestResult& r : want) EXPECT_EQ(r.finish[0], FinishReason::stop);
}

TEST_F(SpecDecode, TheContextsEndBoundsTheDrafts) {
  std::vector<Request> requests = repetitive_requests(4, vocab_, 33, 200);
  EngineOptions base = small_options();
  base.max_model_len = 60;
  for (Request& r : requests) r.max_tokens = 60 - int32_t(r.prompt.size());
  std::vector<RequestResult> want;
  {
    EngineCore core(*m_.model, base);
    want = run_core(core, requests);
  }
  EngineOptions o = base;
  o.speculative_tokens = 8;
  o.draft_source = std::make_shared<OracleDrafts>(full_sequences(requests, want), vocab_);
  EngineCore core(*m_.model, o);
  expect_identical(run_core(core, requests), want, "drafts near the context's end");
  for (const RequestResult& r : want) EXPECT_EQ(r.finish[0], FinishReason::length);
}

TEST_F(SpecDecode, ForksAndPromptLogprobsSpeculateOnlyAfterTheirPrompt) {
  std::vector<Request> requests = repetitive_requests(4, vocab_, 44, 30);
  requests[1].sampling.n = 3;
  requests[2].sampling.prompt_logprobs = 2;
  const std::vector<RequestResult> want = plain(requests);
  EngineOptions o = small_options();
  o.speculative_tokens = 4;
  o.ngram = {1, 3};
  EngineCore core(*m_.model, o);
  const std::vector<RequestResult> got = run_core(core, requests);
  expect_identical(got, want, "n = 3 and prompt logprobs");
  ASSERT_EQ(got[2].prompt_logprobs.size(), want[2].prompt_logprobs.size());
  for (size_t t = 0; t < got[2].prompt_logprobs.size(); ++t)
    EXPECT_EQ(got[2].prompt_logprobs[t].logprob, want[2].prompt_logprobs[t].logprob) << "prompt token " << t + 1;
}

// Qwen3.5 (Gated DeltaNet + attention): a rejected draft brings back the state copied before the
// row, and the next row computes the kept tokens again. Snapshot boundaries every block, so that
// drafts end at them and full acceptances save snapshots there; the second pass resumes from them.
TEST(SpecDecodeHybrid, RejectedDraftsRestoreTheRecurrentState) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  const int32_t vocab = int32_t(m.model->config().vocab_size);
  std::vector<Request> requests = repetitive_requests(6, vocab, 3, 40);
  EngineOptions base = small_options();
  base.snapshot_interval_blocks = 1;
  std::vector<RequestResult> want;
  {
    EngineCore core(*m.model, base);
    want = run_core(core, requests);
  }
  const auto full = full_sequences(requests, want);
  for (int32_t bad : {-1, 0, 2}) {
    EngineOptions o = base;
    o.speculative_tokens = 20;  // more than a hybrid row takes (15)
    o.draft_source = std::make_shared<OracleDrafts>(full, vocab, bad);
    EngineCore core(*m.model, o);
    expect_identical(run_core(core, requests), want, "hybrid, drafts wrong at " + std::to_string(bad));
    const EngineStats s = core.stats();
    EXPECT_GT(s.spec_drafted_tokens, 0);
    EXPECT_LE(s.spec_drafted_tokens, s.spec_verify_rows * Scheduler::kMaxRecurrentDrafts);
    if (bad < 0) {
      EXPECT_EQ(s.spec_accepted_tokens, s.spec_drafted_tokens);
    }
    if (bad >= 0) {
      EXPECT_LE(s.spec_accepted_tokens, s.spec_verify_rows * bad);
    }
    EXPECT_GT(s.state_snapshots_saved, 0);
    // Every first draft wrong: each rollback's recompute row drafts again, so nearly every token
    // after a request's first comes from a verifying row.
    if (bad == 0) {
      EXPECT_GE(s.spec_verify_rows * 10, s.generated_tokens * 8);
    }
    // Again, from the prefix cache and its snapshots (prompts and outputs), greedy requests only.
    std::vector<Request> again;
    for (size_t i = 0; i < requests.size(); i += 2) {
      Request r = requests[i];
      r.prompt.insert(r.prompt.end(), want[i].tokens[0].begin(), want[i].tokens[0].begin() + 20);
      r.max_tokens = 20;
      again.push_back(r);
    }
    std::vector<RequestResult> want_again;
    {
      EngineCore plain(*m.model, base);
      want_again = run_core(plain, again);
    }
    const int64_t hits = core.stats().prefix_hit_tokens;
    expect_identical(run_core(core, again), want_again, "hybrid, resumed, drafts wrong at " + std::to_string(bad));
    EXPECT_GT(core.stats().prefix_hit_tokens, hits);
  }
  // The n-gram lookup on the hybrid model.
  EngineOptions o = base;
  o.speculative_tokens = 4;
  o.ngram = {1, 4};
  EngineCore core(*m.model, o);
  expect_identical(run_core(core, requests), want, "hybrid, n-gram drafts");
  EXPECT_GT(core.stats().spec_drafted_tokens, 0);
}

// A hybrid row's spare state slot never takes the slot a waiting request needs: with 3 slots, two
// running sequences that could draft and a third request arriving, the third is admitted at once.
TEST(SpecDecodeHybrid, DraftsLeaveTheWaitingRequestItsStateSlot) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  const int32_t vocab = int32_t(m.model->config().vocab_size);
  const std::vector<Request> requests = repetitive_requests(3, vocab, 8, 30);
  EngineOptions o = small_options();
  o.max_state_slots = 3;
  o.speculative_tokens = 4;
  struct Garbage final : DraftSource {  // always four drafts
    void propose(std::span<const int32_t>, int32_t max_drafts, std::vector<int32_t>& out) override {
      for (int32_t j = 0; j < std::min(max_drafts, 4); ++j) out.push_back(1 + j);
    }
  };
  o.draft_source = std::make_shared<Garbage>();
  EngineCore core(*m.model, o);
  std::vector<RequestHandle> handles;
  auto add = [&](const Request& r) {
    handles.push_back(std::make_shared<RequestStream>(900 + handles.size()));
    core.add(r, handles.back(), Clock::now());
  };
  add(requests[0]);
  add(requests[1]);
  for (int i = 0; i < 3; ++i) core.step();  // both prefilled and decoding, drafting each step
  ASSERT_EQ(core.scheduler().num_running(), 2);
  EXPECT_GT(core.stats().spec_verify_rows, 0);
  add(requests[2]);
  core.step();
  EXPECT_EQ(core.scheduler().num_running(), 3) << "a draft's spare slot held the new request back";
  while (core.step()) {
  }
  for (auto& h : handles) EXPECT_EQ(collect(*h).tokens[0].size(), 30u);
  EXPECT_EQ(core.state_pool().num_free(), 3);
}

TEST(SpecDecodeOptions, OutOfRangeValuesAreRefusedNamingTheOption) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  EngineOptions o = small_options();
  o.speculative_tokens = 33;
  try {
    EngineCore core(*m.model, o);
    FAIL() << "33 drafted tokens accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speculative_tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rill
