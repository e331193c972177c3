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

}  // namespace
}  // namespace rill
