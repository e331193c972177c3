// EngineCore end to end on the fixture models (CPU): greedy output equal to the transformers
// reference; 32 requests of different lengths batched together (chunked prefill, greedy and
// seeded sampling with penalties) give exactly the tokens each gives alone; bitwise batch
// invariance of the model's logits; stop tokens; n > 1 sequences sharing prompt blocks
// (copy-on-write) equal to their single-sequence runs. KV invariants are checked after every step
// and no block may stay in use after a test.
#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

class FixtureEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureEngine, GreedyMatchesTransformers) {
  Loaded m = load_fixture(kFixtures + GetParam());
  const Reference ref = load_reference(GetParam());
  std::vector<Request> requests;
  for (auto& p : ref.prompts) requests.push_back(make_request(p, int32_t(ref.greedy[0].size())));
  EngineCore core(*m.model, small_options());
  std::vector<RequestResult> got = run_core(core, requests);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].tokens.size(), 1u);
    EXPECT_EQ(got[i].tokens[0], ref.greedy[i]) << "prompt " << i;
    EXPECT_EQ(got[i].finish[0], FinishReason::length);
    EXPECT_EQ(got[i].prompt_tokens, int32_t(ref.prompts[i].size()));
  }
}

TEST_P(FixtureEngine, ThirtyTwoTogetherEqualAlone) {
  Loaded m = load_fixture(kFixtures + GetParam());
  const int32_t vocab = int32_t(m.model->config().vocab_size);
  const std::vector<Request> requests = mixed_requests(32, vocab, 42);
  const std::vector<RequestResult> alone = run_alone(*m.model, requests);
  // All 32 in one engine, prefill in chunks of at most 48 tokens per step mixed with decodes.
  EngineOptions o = small_options();
  o.max_num_batched_tokens = 48;
  EngineCore core(*m.model, o);
  expect_same_tokens(run_core(core, requests), alone, "batched");
  // And with a large budget: whole prompts in one step.
  EngineOptions big = small_options();
  big.max_num_batched_tokens = 8192;
  EngineCore core2(*m.model, big);
  expect_same_tokens(run_core(core2, requests), alone, "one-step prefill");
  // Sanity: the sampled requests really sample (not all greedy-equal), and lengths differ.
  EXPECT_NE(alone[1].tokens[0].size(), alone[3].tokens[0].size());
}

INSTANTIATE_TEST_SUITE_P(Models, FixtureEngine, ::testing::Values("qwen3-tiny", "llama3-tiny"));

// The model's logits for a row do not depend on the other rows of the step, nor on whether a
// position is computed in a prefill chunk or as a single decode token.
TEST(BatchInvariance, LogitsBitwiseAloneVsBatchOf64AndPrefillVsDecode) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const int32_t bs = 16, V = int32_t(m.model->config().vocab_size);
  KvBuffers kv(*m.kernels, m.model->kv_spec(), 64 * 8, bs);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 64; ++r) prompts.push_back(random_tokens(rng, 1 + int32_t(rng() % 100u), V));
  auto table = [&](int r) {
    std::vector<int32_t> t;
    for (int b = 0; b < 8; ++b) t.push_back(r * 8 + b);
    return t;
  };
  auto host = [&](const Tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    m.kernels->download(t, v.data());
    return v;
  };
  std::vector<std::vector<float>> alone;
  for (int r = 0; r < 64; ++r) {
    StepBatchBuilder b(bs);
    b.add_row(prompts[size_t(r)], 0, table(r), Logits::all);
    alone.push_back(host(m.model->forward(b.build(), kv.layers())));
  }
  StepBatchBuilder b(bs);
  for (int r = 0; r < 64; ++r) b.add_row(prompts[size_t(r)], 0, table(r), Logits::all);
  std::vector<float> batched = host(m.model->forward(b.build(), kv.layers()));
  size_t offset = 0;
  for (int r = 0; r < 64; ++r) {
    ASSERT_EQ(0, std::memcmp(alone[size_t(r)].data(), batched.data() + offset, alone[size_t(r)].size() * 4))
        << "row " << r << " (" << prompts[size_t(r)].size() << " tokens) differs alone vs in a batch of 64";
    offset += alone[size_t(r)].size();
  }
  // Prefill vs decode: the last position of row 0 computed as a one-token step after the rest.
  const std::vector<int32_t>& p = prompts[5].size() > 2 ? prompts[5] : prompts[6];
  const int r = prompts[5].size() > 2 ? 5 : 6;
  StepBatchBuilder head(bs);
  head.add_row(std::span<const int32_t>(p.data(), p.size() - 1), 0, table(r), Logits::none);
  m.model->forward(head.build(), kv.layers());
  StepBatchBuilder tail(bs);
  tail.add_row(std::span<const int32_t>(p.data() + p.size() - 1, 1), int32_t(p.size()) - 1, table(r), Logits::last);
  std::vector<float> decode = host(m.model->forward(tail.build(), kv.layers()));
  EXPECT_EQ(0, std::memcmp(decode.data(), alone[size_t(r)].data() + (p.size() - 1) * size_t(V), size_t(V) * 4))
      << "the last position's logits differ between prefill and decode";
}

TEST(EngineCoreTest, KvMemoryBeyondTheMachineIsRefusedNamingTheFlag) {
  // 2^50 bytes of KV cache: no machine this runs on has them; refused before anything is allocated.
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  try {
    EngineCore core(*m.model, small_options(size_t(1) << 50));
    FAIL() << "a 2^50-byte KV cache was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--kv-memory"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(size_t(1) << 50)), std::string::npos) << what;
    EXPECT_NE(what.find("available"), std::string::npos) << what;
  }
}

TEST(EngineCoreTest, StopTokenEndsTheSequence) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const Reference ref = load_reference("qwen3-tiny");
  Request r = make_request(ref.prompts[1], 32);
  r.stop_token_ids = {ref.greedy[1][6]};
  // The stop token may occur earlier in the reference: the sequence ends at its first occurrence.
  size_t first = size_t(std::find(ref.greedy[1].begin(), ref.greedy[1].end(), ref.greedy[1][6]) - ref.greedy[1].begin());
  EngineCore core(*m.model, small_options());
  RequestResult got = run_core(core, {r})[0];
  EXPECT_EQ(got.tokens[0], std::vector<int32_t>(ref.greedy[1].begin(), ref.greedy[1].begin() + long(first) + 1));
  EXPECT_EQ(got.finish[0], FinishReason::stop);
}

TEST(EngineCoreTest, NSequencesShareThePromptAndEqualSingleRuns) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::mt19937 rng(9);
  Request r = make_request(random_tokens(rng, 21, 1000), 24, 1.0f, 77);  // 21: a shared partial block
  r.sampling.n = 4;
  r.sampling.frequency_penalty = 0.3f;
  EngineOptions o = small_options();
  o.block_size = 8;
  EngineCore core(*m.model, o);
  RequestResult got = run_core(core, {r})[0];
  ASSERT_EQ(got.tokens.size(), 4u);
  std::vector<Request> singles;
  for (int32_t i = 0; i < 4; ++i) {
    Request s = r;
    s.sampling.n = 1;
    s.sampling.seed = sequence_seed(77, i);
    singles.push_back(s);
  }
  std::vector<RequestResult> want = run_alone(*m.model, singles);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got.tokens[i], want[i].tokens[0]) << "sequence " << i;
  EXPECT_NE(got.tokens[0], got.tokens[1]);  // different streams
  // Greedy n = 2: identical sequences.
  Request g = make_request(r.prompt, 10);
  g.sampling.n = 2;
  RequestResult gg = run_core(core, {g})[0];
  EXPECT_EQ(gg.tokens[0], gg.tokens[1]);
  EXPECT_EQ(gg.tokens[0], run_alone(*m.model, {make_request(r.prompt, 10)})[0].tokens[0]);
}

TEST(EngineCoreTest, LogprobsOfGreedyTokensAreTheMaximum) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  Request r = make_request(load_reference("qwen3-tiny").prompts[0], 6);
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 3;
  EngineCore core(*m.model, small_options());
  RequestResult got = run_core(core, {r})[0];
  ASSERT_EQ(got.top_logprobs[0].size(), 6u);
  for (size_t t = 0; t < 6; ++t) {
    ASSERT_EQ(got.top_logprobs[0][t].size(), 3u);
    EXPECT_EQ(got.top_logprobs[0][t][0].first, got.tokens[0][t]);
    EXPECT_EQ(got.top_logprobs[0][t][0].second, got.logprobs[0][t]);
    EXPECT_LT(got.logprobs[0][t], 0.f);
    EXPECT_GE(got.top_logprobs[0][t][0].second, got.top_logprobs[0][t][1].second);
  }
}

// Prompt logprobs (SamplingParams::prompt_logprobs): prompt token t's entry is the log-softmax of
// the model's logits at position t - 1 (one forward over the whole prompt), with its top
// alternatives; the same whether the prompt runs in one step, in chunks cut by the token budget
// and by the scoring budget, after a cached prefix (which must not skip the scoring), beside other
// requests, or with n > 1; the generated tokens do not change.
TEST(EngineCoreTest, PromptLogprobsAreTheLogSoftmaxOfThePrefixLogits) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const int32_t V = int32_t(m.model->config().vocab_size);
  std::mt19937 rng(17);
  const std::vector<int32_t> prompt = random_tokens(rng, 70, V);
  // The reference: logits of every position of the prompt in one forward.
  std::vector<float> logits;
  {
    KvBuffers kv(*m.kernels, m.model->kv_spec(), 8, 16);
    StepBatchBuilder b(16);
    b.add_row(prompt, 0, std::vector<int32_t>{0, 1, 2, 3, 4}, Logits::all);
    const Tensor out = m.model->forward(b.build(), kv.layers());
    logits.resize(size_t(out.numel()));
    m.kernels->download(out, logits.data());
  }
  auto expect_scores = [&](const RequestResult& got, const std::string& what) {
    ASSERT_EQ(got.prompt_logprobs.size(), prompt.size() - 1) << what;
    for (size_t t = 1; t < prompt.size(); ++t) {
      const float* x = logits.data() + (t - 1) * size_t(V);
      const PromptLogprob& lp = got.prompt_logprobs[t - 1];
      ASSERT_NEAR(lp.logprob, log_softmax_at(x, V, prompt[t]), 1e-4) << what << ": prompt token " << t;
      ASSERT_EQ(lp.top_logprobs.size(), 2u) << what;
      const int32_t best = int32_t(std::max_element(x, x + V) - x);
      EXPECT_EQ(lp.top_logprobs[0].first, best) << what << ": prompt token " << t;
      EXPECT_NEAR(lp.top_logprobs[0].second, log_softmax_at(x, V, best), 1e-4) << what;
      EXPECT_GE(lp.top_logprobs[0].second, lp.top_logprobs[1].second) << what;
    }
  };
  Request plain = make_request(prompt, 5);
  Request scored = plain;
  scored.sampling.prompt_logprobs = 2;
  const RequestResult want = run_alone(*m.model, {plain})[0];
  EXPECT_TRUE(want.prompt_logprobs.empty());
  {
    EngineCore core(*m.model, small_options());
    const RequestResult got = run_core(core, {scored})[0];
    expect_scores(got, "one step");
    EXPECT_EQ(got.tokens, want.tokens);
  }
  {
    // Chunks of at most 24 tokens, scored at most 16 a step, beside a request that scores nothing.
    EngineOptions o = small_options();
    o.block_size = 8;
    o.max_num_batched_tokens = 24;
    o.max_scored_tokens = 16;
    EngineCore core(*m.model, o);
    const std::vector<RequestResult> got = run_core(core, {plain, scored, plain});
    expect_scores(got[1], "chunked");
    for (const RequestResult& r : got) EXPECT_EQ(r.tokens, want.tokens);
    EXPECT_TRUE(got[0].prompt_logprobs.empty());
    // The prompt is cached now: scoring it again computes it again (and takes no cached prefix).
    const RequestResult again = run_core(core, {scored})[0];
    expect_scores(again, "after a cached prefix");
    EXPECT_EQ(again.cached_tokens, 0);
    EXPECT_EQ(again.tokens, want.tokens);
    EXPECT_GT(run_core(core, {plain})[0].cached_tokens, 0);  // the cache itself holds the prompt
  }
  {
    Request forked = scored;
    forked.sampling.n = 3;
    EngineCore core(*m.model, small_options());
    const RequestResult got = run_core(core, {forked})[0];
    expect_scores(got, "n = 3");
    for (const auto& t : got.tokens) EXPECT_EQ(t, want.tokens[0]);
  }
  // A one-token prompt has nothing to score; an out-of-range count is refused, naming the field.
  Request one = make_request({prompt[0]}, 2);
  one.sampling.prompt_logprobs = 0;
  EngineCore core(*m.model, small_options());
  EXPECT_TRUE(run_core(core, {one})[0].prompt_logprobs.empty());
  one.sampling.prompt_logprobs = 21;
  try {
    core.validate(one);
    FAIL() << "prompt_logprobs 21 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt_logprobs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rill
