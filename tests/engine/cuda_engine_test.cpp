// CUDA variants (skipped without a GPU; run them with --gtest_filter='Cuda*' on the GPU machine):
// Kernels::sample() on the device against the same naive double reference as the CPU test
// (frequencies over 40,000 seeded draws), greedy/logprobs equal to the CPU op, bitwise
// alone-vs-batch-of-64 logits of the model, 32 requests batched together equal to solo runs, and
// speculative decoding equal to plain decoding.
#include <cmath>
#include <numeric>

#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no usable GPU"

// Runs sample() on `k` with host inputs; returns tokens and the logprobs rows.
struct SampleOut {
  std::vector<int32_t> tokens, top_ids;
  std::vector<float> logprobs;
};
SampleOut run_sample(Kernels& k, const std::vector<float>& logits, int64_t V, const std::vector<SamplingRowParams>& p,
                     const std::vector<SamplingAdjust>& adjust, const std::vector<int32_t>& pending = {}) {
  const int64_t L = int64_t(logits.size()) / V, R = int64_t(p.size());
  Allocator& alloc = k.allocator();
  Buffer bl(alloc, logits.size() * 4), bp(alloc, p.size() * sizeof(SamplingRowParams)),
      ba(alloc, std::max<size_t>(1, adjust.size()) * sizeof(SamplingAdjust)), bw(alloc, size_t(R * V) * 4),
      bt(alloc, size_t(R) * 4), blp(alloc, size_t(R) * (1 + kMaxTopLogprobs) * 4), bti(alloc, size_t(R) * kMaxTopLogprobs * 4);
  SampleArgs a;
  a.logits = bl.as(DType::f32, {L, V});
  k.upload(logits.data(), a.logits);
  a.params = bp.as(DType::u8, {int64_t(p.size() * sizeof(SamplingRowParams))});
  k.upload(p.data(), a.params);
  if (!adjust.empty()) {
    a.adjust = ba.as(DType::u8, {int64_t(adjust.size() * sizeof(SamplingAdjust))});
    k.upload(adjust.data(), a.adjust);
  }
  a.workspace = bw.as(DType::f32, {R, V});
  a.tokens = bt.as(DType::i32, {R});
  a.logprobs = blp.as(DType::f32, {R, 1 + kMaxTopLogprobs});
  a.top_ids = bti.as(DType::i32, {R, kMaxTopLogprobs});
  Buffer bpend(alloc, std::max<size_t>(1, pending.size()) * 4);
  if (!pending.empty()) {
    a.pending_tokens = bpend.as(DType::i32, {int64_t(pending.size())});
    k.upload(pending.data(), a.pending_tokens);
  }
  k.sample(a);
  SampleOut o;
  o.tokens.resize(size_t(R));
  o.logprobs.resize(size_t(R) * (1 + kMaxTopLogprobs));
  o.top_ids.resize(size_t(R) * kMaxTopLogprobs);
  k.download(a.tokens, o.tokens.data());
  k.download(a.logprobs, o.logprobs.data());
  k.download(a.top_ids, o.top_ids.data());
  return o;
}

// The kept, renormalised distribution (the documented semantics, in double).
std::vector<double> reference(std::vector<double> x, const SamplingRowParams& p) {
  const size_t V = x.size();
  for (double& v : x) v /= p.temperature;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] > x[b]; });
  const double m = x[order[0]];
  std::vector<bool> keep(V, true);
  if (p.top_k > 0 && size_t(p.top_k) < V)
    for (size_t i = 0; i < V; ++i) keep[i] = x[i] >= x[order[size_t(p.top_k) - 1]];
  if (p.top_p < 1.f) {
    double total = 0, cum = 0, threshold = -INFINITY;
    for (size_t i = 0; i < V; ++i)
      if (keep[i]) total += std::exp(x[i] - m);
    for (size_t i : order)
      if (keep[i] && (cum += std::exp(x[i] - m)) >= p.top_p * total) {
        threshold = x[i];
        break;
      }
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && x[i] >= threshold;
  }
  if (p.min_p > 0)
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && std::exp(x[i] - m) >= p.min_p;
  std::vector<double> q(V, 0.0);
  double z = 0;
  for (size_t i = 0; i < V; ++i)
    if (keep[i]) z += q[i] = std::exp(x[i] - m);
  for (double& v : q) v /= z;
  return q;
}

const std::vector<float> kLogits{2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f, 1.0f, 0.25f};

TEST(CudaSampler, DistributionsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_cuda_kernels(0);
  const int n = 40000;
  SamplingRowParams cases[4];
  cases[0].temperature = 0.8f;
  cases[1].temperature = 1.3f, cases[1].top_k = 3;
  cases[2].top_p = 0.6f;
  cases[3].min_p = 0.3f, cases[3].top_p = 0.9f, cases[3].top_k = 6;
  for (SamplingRowParams base : cases) {
    base.seed = 21;
    std::vector<SamplingRowParams> rows(static_cast<size_t>(n), base);
    for (int i = 0; i < n; ++i) rows[size_t(i)].step = uint64_t(i);
    SampleOut o = run_sample(*gpu, kLogits, int64_t(kLogits.size()), rows, {});
    std::vector<double> want = reference(std::vector<double>(kLogits.begin(), kLogits.end()), base);
    std::vector<int> count(kLogits.size(), 0);
    for (int32_t t : o.tokens) {
      ASSERT_TRUE(t >= 0 && t < int32_t(kLogits.size()));
      ++count[size_t(t)];
    }
    for (size_t i = 0; i < kLogits.size(); ++i) {
      if (want[i] == 0) {
        EXPECT_EQ(count[i], 0) << "token " << i << " outside the kept set";
        continue;
      }
      EXPECT_NEAR(double(count[i]) / n, want[i], 5 * std::sqrt(want[i] * (1 - want[i]) / n) + 1e-4) << "token " << i;
    }
    // The CPU op draws the same tokens (same noise, same thresholds) up to rounding near ties.
    auto cpu = make_cpu_kernels();
    SampleOut c = run_sample(*cpu, kLogits, int64_t(kLogits.size()), rows, {});
    int same = 0;
    for (int i = 0; i < n; ++i) same += c.tokens[size_t(i)] == o.tokens[size_t(i)];
    EXPECT_GE(same, n - n / 1000) << "CPU and CUDA sample ops disagree on " << n - same << " of " << n << " draws";
  }
}

// `rows` rows of logits over the 8B shape's vocabulary, N(0, 3) from `seed`.
constexpr int64_t kSampleVocab = 151936;
std::vector<float> random_logits(int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> logits(size_t(rows) * size_t(kSampleVocab));
  for (float& x : logits) x = d(rng);
  return logits;
}

TEST(CudaSampler, GreedyPenaltiesAndLogprobsEqualTheCpuOp) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_cuda_kernels(0);
  auto cpu = make_cpu_kernels();
  const int64_t V = kSampleVocab;
  const std::vector<float> logits = random_logits(3, 4);
  std::vector<SamplingRowParams> rows(6);
  std::vector<SamplingAdjust> adjust{{5, 2, 1, 0.f}, {77, 0, 1, 3.f}, {1000, 1, 1, -INFINITY}};
  for (int r = 0; r < 6; ++r) {
    rows[size_t(r)].logit_row = r % 3;
    rows[size_t(r)].temperature = r < 3 ? 0.f : 0.7f;
    rows[size_t(r)].top_k = r == 4 ? 50 : 0;
    rows[size_t(r)].top_p = r == 5 ? 0.9f : 1.f;
    rows[size_t(r)].repetition_penalty = 1.3f;
    rows[size_t(r)].frequency_penalty = 0.5f;
    rows[size_t(r)].adjust_end = 3;
    rows[size_t(r)].logprobs = 1;
    rows[size_t(r)].num_top_logprobs = 20;
    rows[size_t(r)].seed = uint64_t(r);
  }
  SampleOut g = run_sample(*gpu, logits, V, rows, adjust), c = run_sample(*cpu, logits, V, rows, adjust);
  EXPECT_EQ(g.tokens, c.tokens);
  EXPECT_EQ(g.top_ids, c.top_ids);
  for (size_t i = 0; i < g.logprobs.size(); ++i) EXPECT_NEAR(g.logprobs[i], c.logprobs[i], 2e-4) << i;
}

// Scored rows (a prompt token's logprob, SamplingRowParams::score_token) on the GPU: the scored token
// back, its logprob equal to the CPU op's and to a double log-softmax of the row, the same top
// alternatives, with penalties, bias and temperature on the row ignored; drawing rows beside them
// unchanged.
TEST(CudaSampler, ScoredTokensEqualTheCpuOpAndLogSoftmax) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_cuda_kernels(0);
  auto cpu = make_cpu_kernels();
  const int64_t V = kSampleVocab;
  const std::vector<float> logits = random_logits(4, 6);
  std::vector<SamplingAdjust> adjust{{5, 2, 1, 0.f}, {77, 0, 1, 3.f}, {1000, 1, 1, -INFINITY}};
  std::vector<SamplingRowParams> rows(9);
  for (int r = 0; r < 9; ++r) {
    SamplingRowParams& p = rows[size_t(r)];
    p.logit_row = r % 4;
    p.temperature = r % 3 == 0 ? 0.f : 0.9f;
    p.top_k = r % 2 ? 40 : 0;
    p.repetition_penalty = 1.3f;
    p.adjust_end = 3;
    p.logprobs = 1;
    p.num_top_logprobs = r % 5 == 0 ? 0 : 20;
    p.seed = uint64_t(r);
    // Rows 0-6 score: an adjusted token, a banned one, the first and last ids, random ones; 7-8 draw.
    const int32_t scored[] = {77, 1000, 0, int32_t(V - 1), 12345, 98765, 5};
    if (r < 7) p.score_token = scored[r];
  }
  const SampleOut g = run_sample(*gpu, logits, V, rows, adjust), c = run_sample(*cpu, logits, V, rows, adjust);
  EXPECT_EQ(g.tokens, c.tokens);
  EXPECT_EQ(g.top_ids, c.top_ids);
  for (size_t i = 0; i < g.logprobs.size(); ++i)
    if (std::isfinite(c.logprobs[i]) || std::isfinite(g.logprobs[i])) {
      EXPECT_NEAR(g.logprobs[i], c.logprobs[i], 2e-4) << i;
    }
  for (int r = 0; r < 7; ++r) {
    const SamplingRowParams& p = rows[size_t(r)];
    EXPECT_EQ(g.tokens[size_t(r)], p.score_token) << r;
    const float* x = logits.data() + size_t(p.logit_row) * size_t(V);
    EXPECT_NEAR(g.logprobs[size_t(r) * (1 + kMaxTopLogprobs)], log_softmax_at(x, V, p.score_token), 2e-4) << r;
  }
}

// A pending draw (SamplingRowParams::pending) is adjusted as the host's appended token would be:
// on the GPU equal to the CPU op, and equal to the table with the token counted in.
TEST(CudaSampler, PendingDrawEqualsTheCpuOpAndTheCountedTable) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_cuda_kernels(0);
  auto cpu = make_cpu_kernels();
  const int64_t V = kSampleVocab;
  const std::vector<float> logits = random_logits(2, 5);
  // Token 5 has an entry (counted twice), token 900 has none; both logit rows' maxima are pending.
  auto top = [&](int row) {
    const auto first = logits.begin() + row * V;
    return int32_t(std::max_element(first, first + V) - first);
  };
  const std::vector<int32_t> pending = {5, 900, top(0), top(1)};
  std::vector<SamplingAdjust> base{{5, 2, 0, 0.5f}, {77, 0, 1, 3.f}};
  std::vector<SamplingRowParams> rows;
  std::vector<SamplingAdjust> counted_all;
  std::vector<SamplingRowParams> counted_rows;
  for (int i = 0; i < 8; ++i) {
    SamplingRowParams r;
    r.logit_row = i % 2;
    r.temperature = i < 4 ? 0.f : 0.8f;
    r.repetition_penalty = 1.3f;
    r.presence_penalty = 1.5f;
    r.frequency_penalty = 2.f;
    r.adjust_end = int32_t(base.size());
    r.pending = i % 4;
    r.seed = uint64_t(i);
    rows.push_back(r);
    // The same row with the pending token appended on the host, as Sequence::append does.
    std::vector<SamplingAdjust> t = base;
    const int32_t tok = pending[size_t(i % 4)];
    auto it = std::find_if(t.begin(), t.end(), [&](const SamplingAdjust& a) { return a.token == tok; });
    if (it == t.end()) t.push_back({tok, 1, 1, 0.f});
    else it->output_count += 1, it->in_context = 1;
    SamplingRowParams c = r;
    c.pending = -1;
    c.adjust_begin = int32_t(counted_all.size());
    counted_all.insert(counted_all.end(), t.begin(), t.end());
    c.adjust_end = int32_t(counted_all.size());
    counted_rows.push_back(c);
  }
  const SampleOut g = run_sample(*gpu, logits, V, rows, base, pending);
  const SampleOut c = run_sample(*cpu, logits, V, rows, base, pending);
  const SampleOut gc = run_sample(*gpu, logits, V, counted_rows, counted_all);
  EXPECT_EQ(g.tokens, c.tokens);
  EXPECT_EQ(g.tokens, gc.tokens);
  // The penalties moved the greedy rows off their pending maxima (the check can fail).
  EXPECT_NE(g.tokens[2], top(0));
  EXPECT_NE(g.tokens[3], top(1));
}

TEST(CudaEngine, LogitsBitwiseAloneVsBatchOf64) {
  SKIP_WITHOUT_GPU();
  auto kernels = make_cuda_kernels(0);
  auto model = load_model(kFixtures + "qwen3-tiny", *kernels, LoadOptions{std::nullopt, false});
  const int32_t bs = 16, V = int32_t(model->config().vocab_size);
  KvBuffers kv(*kernels, model->kv_spec(), 64 * 8, bs);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 64; ++r) prompts.push_back(random_tokens(rng, 1 + int32_t(rng() % 100u), V));
  auto table = [&](int r) {
    std::vector<int32_t> t;
    for (int b = 0; b < 8; ++b) t.push_back(r * 8 + b);
    return t;
  };
  auto host = [&](const Tensor& t) {
    std::vector<uint16_t> v(size_t(t.numel()) * dtype_size(t.dtype()) / 2);
    kernels->download(t, v.data());
    return v;
  };
  std::vector<std::vector<uint16_t>> alone;
  for (int r = 0; r < 64; ++r) {
    StepBatchBuilder b(bs);
    b.add_row(prompts[size_t(r)], 0, table(r), Logits::last);
    alone.push_back(host(model->forward(b.build(), kv.layers())));
  }
  StepBatchBuilder b(bs);
  for (int r = 0; r < 64; ++r) b.add_row(prompts[size_t(r)], 0, table(r), Logits::last);
  std::vector<uint16_t> batched = host(model->forward(b.build(), kv.layers()));
  int differ = 0;
  for (int r = 0; r < 64; ++r)
    differ += std::memcmp(alone[size_t(r)].data(), batched.data() + size_t(r) * alone[0].size(), alone[0].size() * 2) != 0;
  EXPECT_EQ(differ, 0) << differ << " of 64 rows' last-position logits differ alone vs in a batch of 64";
  // Decode: 64 rows advancing one token together vs one at a time.
  std::vector<std::vector<uint16_t>> dec_alone;
  std::vector<int32_t> next(64, 11);
  for (int r = 0; r < 64; ++r) {
    StepBatchBuilder d(bs);
    d.add_row(std::span<const int32_t>(&next[size_t(r)], 1), int32_t(prompts[size_t(r)].size()), table(r), Logits::last);
    dec_alone.push_back(host(model->forward(d.build(), kv.layers())));
  }
  StepBatchBuilder d(bs);
  for (int r = 0; r < 64; ++r)
    d.add_row(std::span<const int32_t>(&next[size_t(r)], 1), int32_t(prompts[size_t(r)].size()), table(r), Logits::last);
  std::vector<uint16_t> dec_batched = host(model->forward(d.build(), kv.layers()));
  differ = 0;
  for (int r = 0; r < 64; ++r)
    differ += std::memcmp(dec_alone[size_t(r)].data(), dec_batched.data() + size_t(r) * dec_alone[0].size(),
                          dec_alone[0].size() * 2) != 0;
  EXPECT_EQ(differ, 0) << differ << " of 64 decode rows differ alone vs in a batch of 64";
}

TEST(CudaEngine, ThirtyTwoTogetherEqualAlone) {
  SKIP_WITHOUT_GPU();
  auto kernels = make_cuda_kernels(0);
  auto model = load_model(kFixtures + "qwen3-tiny", *kernels, LoadOptions{std::nullopt, false});
  const std::vector<Request> requests = mixed_requests(32, 1000, 42);
  const std::vector<RequestResult> alone = run_alone(*model, requests);
  EngineOptions o = small_options();
  o.max_num_batched_tokens = 48;
  EngineCore core(*model, o);
  expect_same_tokens(run_core(core, requests), alone, "cuda batched");
}

// Prompt logprobs on the GPU: prompt token t scored by the log-softmax of the model's logits at
// position t - 1 (one forward over the prompt): to the sampler's rounding in one step, and within
// bf16 noise when the prompt runs in chunks scored 16 a step beside other requests.
TEST(CudaEngine, PromptLogprobsAreTheLogSoftmaxOfThePrefixLogits) {
  SKIP_WITHOUT_GPU();
  auto kernels = make_cuda_kernels(0);
  auto model = load_model(kFixtures + "qwen3-tiny", *kernels, LoadOptions{std::nullopt, false});
  const int32_t V = int32_t(model->config().vocab_size);
  std::mt19937 rng(19);
  const std::vector<int32_t> prompt = random_tokens(rng, 70, 1000);
  std::vector<float> logits;
  {
    KvBuffers kv(*kernels, model->kv_spec(), 8, 16);
    StepBatchBuilder b(16);
    b.add_row(prompt, 0, std::vector<int32_t>{0, 1, 2, 3, 4}, Logits::all);
    const Tensor out = model->forward(b.build(), kv.layers());
    ASSERT_TRUE(out.dtype() == DType::bf16 || out.dtype() == DType::f32) << out.describe();
    if (out.dtype() == DType::f32) {
      logits.resize(size_t(out.numel()));
      kernels->download(out, logits.data());
    } else {
      std::vector<bf16_t> raw(size_t(out.numel()));
      kernels->download(out, raw.data());
      for (bf16_t x : raw) logits.push_back(bf16_to_f32(x));
    }
  }
  auto expect_scores = [&](const RequestResult& got, double tolerance, const std::string& what) {
    ASSERT_EQ(got.prompt_logprobs.size(), prompt.size() - 1) << what;
    for (size_t t = 1; t < prompt.size(); ++t) {
      const float* x = logits.data() + (t - 1) * size_t(V);
      EXPECT_NEAR(got.prompt_logprobs[t - 1].logprob, log_softmax_at(x, V, prompt[t]), tolerance)
          << what << ": prompt token " << t;
      ASSERT_EQ(got.prompt_logprobs[t - 1].top_logprobs.size(), 3u) << what;
    }
  };
  Request scored = make_request(prompt, 4);
  scored.sampling.prompt_logprobs = 3;
  {
    EngineCore core(*model, small_options());
    expect_scores(run_core(core, {scored})[0], 2e-4, "one step");
  }
  EngineOptions o = small_options();
  o.max_num_batched_tokens = 24;
  o.max_scored_tokens = 16;
  EngineCore core(*model, o);
  std::vector<Request> requests = mixed_requests(6, 1000, 8);
  requests.insert(requests.begin() + 2, scored);
  const std::vector<RequestResult> got = run_core(core, requests);
  expect_scores(got[2], 0.05, "chunked");
}

// The hybrid family on the GPU: rows together equal rows alone (state slots, forks), and a
// multi-turn conversation restores its prefix from KV blocks plus a state snapshot, prefills only
// the rest, and gives the tokens of a cold run.
EngineOptions cuda_hybrid_options() {
  EngineOptions o = small_options(size_t(4) << 20);
  o.max_num_batched_tokens = 64;
  o.snapshot_interval_blocks = 2;
  o.max_state_slots = 8;
  return o;
}

TEST(CudaEngine, HybridRowsTogetherEqualAlone) {
  SKIP_WITHOUT_GPU();
  auto kernels = make_cuda_kernels(0);
  auto model = load_model(kFixtures + "qwen35-tiny", *kernels, LoadOptions{std::nullopt, false});
  std::vector<Request> requests = mixed_requests(12, 1000, 5, 90);
  requests[2].sampling.n = 3;
  requests[2].sampling.temperature = 0.9f;
  requests[2].sampling.seed = 99;
  const std::vector<RequestResult> alone = run_alone(*model, requests);
  EngineCore core(*model, cuda_hybrid_options());
  expect_same_tokens(run_core(core, requests), alone, "cuda hybrid together");
  EXPECT_EQ(core.state_pool().num_free(), core.state_pool().num_slots()) << "state slots leaked";
  EXPECT_EQ(core.kv_cache().pool().num_used(), 0) << "blocks leaked";
}

TEST(CudaEngine, HybridMultiTurnReusesThePrefix) {
  SKIP_WITHOUT_GPU();
  auto kernels = make_cuda_kernels(0);
  auto model = load_model(kFixtures + "qwen35-tiny", *kernels, LoadOptions{std::nullopt, false});
  std::mt19937 rng(11);
  EngineCore core(*model, cuda_hybrid_options());
  Request t1 = make_request(random_tokens(rng, 40, 1000), 40);
  RequestResult r1 = run_core(core, {t1})[0];
  Request t2 = t1;
  t2.prompt.insert(t2.prompt.end(), r1.tokens[0].begin(), r1.tokens[0].end());
  const std::vector<int32_t> user = random_tokens(rng, 20, 1000);
  t2.prompt.insert(t2.prompt.end(), user.begin(), user.end());
  t2.max_tokens = 12;
  const int64_t computed_before = core.stats().computed_tokens;
  RequestResult r2 = run_core(core, {t2})[0];
  EXPECT_EQ(r2.cached_tokens, 64);
  EXPECT_EQ(core.stats().computed_tokens - computed_before, (100 - 64) + (12 - 1));
  const std::vector<RequestResult> cold = run_alone(*model, {t1, t2});
  EXPECT_EQ(r1.tokens, cold[0].tokens);
  EXPECT_EQ(r2.tokens, cold[1].tokens);
  EXPECT_EQ(core.state_pool().num_free(), core.state_pool().num_slots()) << "state slots leaked";
}

// Speculative decoding on the GPU: verifying rows run eagerly next to graph-replayed decode steps,
// and their draws equal plain decoding's bit for bit (the kernels do not depend on a row's length),
// with drafts right, wrong from the second on, all wrong, random, and from the n-gram lookup; the dense model
// with step graphs, and the hybrid one with its state restored after a rejection.
TEST(CudaEngine, SpeculativeDecodingEqualsPlainDecoding) {
  SKIP_WITHOUT_GPU();
  auto kernels = make_cuda_kernels(0);
  for (const char* name : {"qwen3-tiny", "qwen35-tiny"}) {
    auto model = load_model(kFixtures + name, *kernels, LoadOptions{std::nullopt, false});
    const bool hybrid = model->state_bytes_per_sequence() > 0;
    const int32_t vocab = int32_t(model->config().vocab_size);
    const std::vector<Request> requests = repetitive_requests(8, vocab, 17, 40);
    EngineOptions base = hybrid ? cuda_hybrid_options() : small_options();
    std::vector<RequestResult> want;
    {
      EngineCore core(*model, base);
      want = run_core(core, requests);
    }
    const auto full = full_sequences(requests, want);
    for (int mode = 0; mode < 5; ++mode) {  // right, wrong from the second, all wrong, random, n-gram
      EngineOptions o = base;
      o.speculative_tokens = 6;
      if (mode < 4)
        o.draft_source = std::make_shared<OracleDrafts>(full, vocab, mode == 1 ? 1 : -1, mode == 2,
                                                        mode == 3 ? std::optional<uint32_t>(9) : std::nullopt);
      else
        o.ngram = {1, 4};
      EngineCore core(*model, o);
      expect_identical(run_core(core, requests), want, std::string(name) + ", draft mode " + std::to_string(mode));
      const EngineStats s = core.stats();
      EXPECT_GT(s.spec_drafted_tokens, 0) << name << " mode " << mode;
      if (mode == 0) {
        EXPECT_EQ(s.spec_accepted_tokens, s.spec_drafted_tokens) << name;
      }
      if (mode == 2) {
        EXPECT_EQ(s.spec_accepted_tokens, 0) << name;
      }
      if (hybrid) {
        EXPECT_EQ(core.state_pool().num_free(), core.state_pool().num_slots()) << "state slots leaked";
      }
    }
  }
}

}  // namespace
}  // namespace rill
