// Kernels::sample() on the CPU against a naive double-precision reference of the documented
// semantics (engine/sampler.h): greedy argmax with ties, logprobs = log_softmax of the raw logits
// and the top-N alternatives, the distributions after temperature / top-k / top-p / min-p and the
// penalties (empirical frequencies over 40,000 seeded draws within 5 standard deviations), the
// support never leaving the kept set, and seeded draws that do not depend on the other rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "core/error.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "kernels/kernels.h"

namespace rill {
namespace {

// Naive reference: the kept, renormalised distribution of one row (double precision).
std::vector<double> reference_distribution(std::vector<double> x, const SamplingRowParams& p,
                                           const std::vector<SamplingAdjust>& adjust) {
  for (const SamplingAdjust& a : adjust) {
    double v = x[size_t(a.token)];
    if (a.in_context && p.repetition_penalty != 1.f) v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    if (a.output_count > 0) v -= double(p.frequency_penalty) * a.output_count + p.presence_penalty;
    x[size_t(a.token)] = v + a.bias;
  }
  const size_t V = x.size();
  for (double& v : x) v /= p.temperature;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] > x[b]; });
  const double m = x[order[0]];
  std::vector<bool> keep(V, true);
  if (p.top_k > 0 && size_t(p.top_k) < V) {
    const double kth = x[order[size_t(p.top_k) - 1]];
    for (size_t i = 0; i < V; ++i) keep[i] = x[i] >= kth;
  }
  if (p.top_p < 1.f) {
    double total = 0;
    for (size_t i = 0; i < V; ++i)
      if (keep[i]) total += std::exp(x[i] - m);
    double cum = 0, threshold = -INFINITY;
    for (size_t i : order) {
      if (!keep[i]) continue;
      cum += std::exp(x[i] - m);
      if (cum >= p.top_p * total) {
        threshold = x[i];
        break;
      }
    }
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && x[i] >= threshold;
  }
  if (p.min_p > 0)
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && std::exp(x[i] - m) >= p.min_p;
  std::vector<double> prob(V, 0.0);
  double z = 0;
  for (size_t i = 0; i < V; ++i)
    if (keep[i]) z += prob[i] = std::exp(x[i] - m);
  for (double& q : prob) q /= z;
  return prob;
}

class SampleOp : public ::testing::Test {
 protected:
  SampleOp() : kernels_(make_cpu_kernels()) {}

  // Runs sample() on host tensors (the CPU backend's device).
  void run(const std::vector<float>& logits, int64_t V, const std::vector<SamplingRowParams>& params,
           const std::vector<SamplingAdjust>& adjust, const std::vector<int32_t>& pending = {}) {
    const int64_t L = int64_t(logits.size()) / V, R = int64_t(params.size());
    logits_ = logits;
    params_ = params;
    adjust_ = adjust;
    workspace_.assign(size_t(R * V), 0.f);
    tokens_.assign(size_t(R), -7);
    logprobs_.assign(size_t(R) * (1 + kMaxTopLogprobs), 0.f);
    top_ids_.assign(size_t(R) * kMaxTopLogprobs, 0);
    SampleArgs a;
    a.logits = Tensor(logits_.data(), DType::f32, {L, V});
    a.params = Tensor(params_.data(), DType::u8, {int64_t(R * int64_t(sizeof(SamplingRowParams)))});
    if (!adjust_.empty())
      a.adjust = Tensor(adjust_.data(), DType::u8, {int64_t(adjust_.size() * sizeof(SamplingAdjust))});
    a.workspace = Tensor(workspace_.data(), DType::f32, {R, V});
    a.tokens = Tensor(tokens_.data(), DType::i32, {R});
    a.logprobs = Tensor(logprobs_.data(), DType::f32, {R, 1 + kMaxTopLogprobs});
    a.top_ids = Tensor(top_ids_.data(), DType::i32, {R, kMaxTopLogprobs});
    pending_ = pending;
    if (!pending_.empty()) a.pending_tokens = Tensor(pending_.data(), DType::i32, {int64_t(pending_.size())});
    kernels_->sample(a);
  }

  // Draws `n` tokens with the same params and seed at steps 0..n-1; checks the frequencies.
  void expect_distribution(const std::vector<float>& logits, SamplingRowParams p,
                           const std::vector<SamplingAdjust>& adjust = {}) {
    const int n = 40000;
    const int64_t V = int64_t(logits.size());
    std::vector<SamplingRowParams> rows(static_cast<size_t>(n), p);
    for (int i = 0; i < n; ++i) {
      rows[size_t(i)].step = uint64_t(i);
      rows[size_t(i)].adjust_begin = 0;
      rows[size_t(i)].adjust_end = int32_t(adjust.size());
    }
    run(logits, V, rows, adjust);
    std::vector<double> x(logits.begin(), logits.end());
    const std::vector<double> want = reference_distribution(x, p, adjust);
    std::vector<int> count(size_t(V), 0);
    for (int32_t t : tokens_) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, V);
      ++count[size_t(t)];
    }
    for (int64_t i = 0; i < V; ++i) {
      const double q = want[size_t(i)], f = double(count[size_t(i)]) / n;
      if (q == 0) {
        EXPECT_EQ(count[size_t(i)], 0) << "token " << i << " is outside the kept set but was drawn";
        continue;
      }
      const double sigma = std::sqrt(q * (1 - q) / n);
      EXPECT_NEAR(f, q, 5 * sigma + 1e-4) << "token " << i;
    }
  }

  std::unique_ptr<Kernels> kernels_;
  std::vector<float> logits_, workspace_, logprobs_;
  std::vector<SamplingRowParams> params_;
  std::vector<SamplingAdjust> adjust_;
  std::vector<int32_t> tokens_, top_ids_, pending_;
};

const std::vector<float> kLogits{2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f, 1.0f, 0.25f};

TEST_F(SampleOp, GreedyPicksTheLowestIdOfTheMaximum) {
  std::vector<float> logits{0.f, 3.f, -1.f, 3.f, NAN, 2.f};
  SamplingRowParams p;
  p.temperature = 0.f;
  run(logits, 6, {p}, {});
  EXPECT_EQ(tokens_[0], 1);
  // A bias moves the maximum; a repetition penalty of a positive logit divides it.
  SamplingRowParams q = p;
  q.adjust_end = 2;
  q.repetition_penalty = 2.f;
  run(logits, 6, {q}, {SamplingAdjust{1, 0, 1, 0.f}, SamplingAdjust{3, 0, 0, -0.5f}});
  EXPECT_EQ(tokens_[0], 3);  // 3/2 = 1.5 < 2.5 (3 - 0.5)
}

TEST_F(SampleOp, LogprobsAreLogSoftmaxOfRawLogits) {
  SamplingRowParams p;
  p.temperature = 0.7f;
  p.top_k = 3;
  p.num_top_logprobs = 5;
  p.logprobs = 1;
  p.adjust_end = 1;
  run(kLogits, int64_t(kLogits.size()), {p}, {SamplingAdjust{0, 3, 1, -2.f}});
  double m = *std::max_element(kLogits.begin(), kLogits.end()), z = 0;
  for (float v : kLogits) z += std::exp(double(v) - m);
  auto logprob = [&](int32_t t) { return double(kLogits[size_t(t)]) - m - std::log(z); };
  EXPECT_NEAR(logprobs_[0], logprob(tokens_[0]), 1e-5);
  // Top 5 of the raw logits, best first; 1.0 appears twice (ids 2 and 8): the lower id first.
  const std::vector<int32_t> want{0, 1, 2, 8, 3};
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(top_ids_[size_t(j)], want[size_t(j)]) << j;
    EXPECT_NEAR(logprobs_[size_t(1 + j)], logprob(want[size_t(j)]), 1e-5) << j;
  }
  EXPECT_EQ(top_ids_[5], -1);
}

// A scored row (SamplingRowParams::score_token) draws nothing: its token is the scored one and its
// logprob that token's raw log-softmax, whatever penalties, bias and temperature the row carries;
// the top alternatives are the same as a drawing row's.
TEST_F(SampleOp, ScoredTokenReportsItsRawLogprob) {
  SamplingRowParams p;
  p.temperature = 0.7f;
  p.top_k = 2;
  p.repetition_penalty = 3.f;
  p.num_top_logprobs = 3;
  p.logprobs = 1;
  p.adjust_end = 1;
  std::vector<SamplingRowParams> rows;
  for (int32_t t : {7, 0, 4}) {  // the least likely token, the most likely, one in between
    SamplingRowParams q = p;
    q.score_token = t;
    rows.push_back(q);
  }
  run(kLogits, int64_t(kLogits.size()), rows, {SamplingAdjust{7, 3, 1, 50.f}});
  double m = *std::max_element(kLogits.begin(), kLogits.end()), z = 0;
  for (float v : kLogits) z += std::exp(double(v) - m);
  auto logprob = [&](int32_t t) { return double(kLogits[size_t(t)]) - m - std::log(z); };
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(tokens_[r], rows[r].score_token) << r;
    EXPECT_NEAR(logprobs_[r * (1 + kMaxTopLogprobs)], logprob(rows[r].score_token), 1e-5) << r;
    const std::vector<int32_t> want{0, 1, 2};
    for (int j = 0; j < 3; ++j) EXPECT_EQ(top_ids_[r * kMaxTopLogprobs + size_t(j)], want[size_t(j)]) << r << " " << j;
  }
  // A token outside the vocabulary is refused, naming the field.
  SamplingRowParams bad = p;
  bad.score_token = int32_t(kLogits.size());
  try {
    run(kLogits, int64_t(kLogits.size()), {bad}, {SamplingAdjust{7, 3, 1, 50.f}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("score_token"), std::string::npos) << e.what();
  }
}

TEST_F(SampleOp, TemperatureOnly) {
  SamplingRowParams p;
  p.temperature = 0.8f;
  p.seed = 11;
  expect_distribution(kLogits, p);
}

TEST_F(SampleOp, TopK) {
  SamplingRowParams p;
  p.temperature = 1.3f;
  p.top_k = 4;  // 2.0, 1.5, and the tie 1.0 / 1.0 at the boundary: 4 kept
  p.seed = 12;
  expect_distribution(kLogits, p);
  p.top_k = 3;  // the boundary value 1.0 is tied: both are kept
  expect_distribution(kLogits, p);
}

TEST_F(SampleOp, TopP) {
  SamplingRowParams p;
  p.temperature = 1.f;
  p.top_p = 0.6f;
  p.seed = 13;
  expect_distribution(kLogits, p);
  p.top_p = 0.9f;
  p.top_k = 6;
  expect_distribution(kLogits, p);
}

TEST_F(SampleOp, MinP) {
  SamplingRowParams p;
  p.temperature = 1.f;
  p.min_p = 0.3f;  // keeps p_i >= 0.3 p_max: logits >= 2 + ln 0.3 = 0.796
  p.seed = 14;
  expect_distribution(kLogits, p);
}

TEST_F(SampleOp, PenaltiesAndBias) {
  SamplingRowParams p;
  p.temperature = 1.f;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  p.seed = 15;
  std::vector<SamplingAdjust> adjust{
      {0, 2, 1, 0.f},       // in the output twice
      {5, 0, 1, 0.f},       // in the prompt only (negative logit: multiplied)
      {4, 0, 0, 1.25f},     // bias only
      {7, 0, 0, -INFINITY}  // banned
  };
  expect_distribution(kLogits, p, adjust);
}

// A pending draw (SamplingRowParams::pending: an id the host has not read yet) is adjusted exactly
// as if it had been appended to the row's table: its entry counted once more and in context, or an
// entry {count 1, in context, no bias} of its own. Greedy rows leave the adjusted logits in the
// workspace: they must be the same bits.
TEST_F(SampleOp, PendingDrawCountsAsAnOutputToken) {
  const int64_t V = int64_t(kLogits.size());
  const std::vector<SamplingAdjust> base{{0, 2, 1, 0.f}, {5, 0, 1, 0.f}, {4, 0, 0, 1.25f}};
  const std::vector<int32_t> pending{0, 3, 5, 4};
  for (float temperature : {0.f, 0.9f}) {
    std::vector<SamplingRowParams> with, counted;
    std::vector<SamplingAdjust> counted_all;
    for (size_t i = 0; i < pending.size(); ++i) {
      SamplingRowParams p;
      p.temperature = temperature;
      p.repetition_penalty = 1.5f;
      p.presence_penalty = 0.4f;
      p.frequency_penalty = 0.3f;
      p.seed = 21;
      p.step = i;
      p.adjust_end = int32_t(base.size());
      p.pending = int32_t(i);
      with.push_back(p);
      std::vector<SamplingAdjust> t = base;
      auto it = std::find_if(t.begin(), t.end(), [&](const SamplingAdjust& a) { return a.token == pending[i]; });
      if (it == t.end()) t.push_back({pending[i], 1, 1, 0.f});
      else it->output_count += 1, it->in_context = 1;
      p.pending = -1;
      p.adjust_begin = int32_t(counted_all.size());
      counted_all.insert(counted_all.end(), t.begin(), t.end());
      p.adjust_end = int32_t(counted_all.size());
      counted.push_back(p);
    }
    run(kLogits, V, with, base, pending);
    const std::vector<int32_t> got = tokens_;
    const std::vector<float> got_w = workspace_;
    run(kLogits, V, counted, counted_all);
    EXPECT_EQ(got, tokens_) << "temperature " << temperature;
    if (temperature == 0.f) {
      EXPECT_EQ(0, std::memcmp(got_w.data(), workspace_.data(), got_w.size() * 4));
    }
  }
  // Token 0 (raw 2.0, counted twice: 1.55) drops below token 1's 1.5 once counted a third time (1.35).
  SamplingRowParams p;
  p.temperature = 0.f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.05f;
  run(kLogits, V, {p}, {});
  p.adjust_end = int32_t(base.size());
  run(kLogits, V, {p}, base);
  EXPECT_EQ(tokens_[0], 0);
  p.pending = 0;
  run(kLogits, V, {p}, base, pending);
  EXPECT_EQ(tokens_[0], 1);
  // An index past pending_tokens is refused, naming the field.
  p.pending = 9;
  EXPECT_THROW(run(kLogits, V, {p}, base, pending), Error);
}

TEST_F(SampleOp, SeededDrawsDoNotDependOnOtherRows) {
  SamplingRowParams a;
  a.temperature = 1.f;
  a.seed = 1234;
  a.step = 7;
  run(kLogits, int64_t(kLogits.size()), {a}, {});
  const int32_t alone = tokens_[0];
  // The same row at position 5 of a batch of 9 rows with other seeds, params and logits rows.
  std::vector<float> two = kLogits;
  for (float v : kLogits) two.push_back(-v);
  std::vector<SamplingRowParams> rows;
  for (int i = 0; i < 9; ++i) {
    SamplingRowParams r;
    r.temperature = 0.5f + 0.1f * float(i);
    r.top_k = i % 3;
    r.seed = uint64_t(i);
    r.step = uint64_t(100 + i);
    r.logit_row = i % 2;
    rows.push_back(r);
  }
  rows[5] = a;
  run(two, int64_t(kLogits.size()), rows, {});
  EXPECT_EQ(tokens_[5], alone);
  // Over many steps the draws change with the step and repeat with the seed.
  std::vector<SamplingRowParams> many(200, a);
  for (int i = 0; i < 200; ++i) many[size_t(i)].step = uint64_t(i);
  run(kLogits, int64_t(kLogits.size()), many, {});
  std::vector<int32_t> first = tokens_;
  run(kLogits, int64_t(kLogits.size()), many, {});
  EXPECT_EQ(tokens_, first);
  for (auto& r : many) r.seed = 999;
  run(kLogits, int64_t(kLogits.size()), many, {});
  EXPECT_NE(tokens_, first);
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 3u);
}

TEST(Sampler, PacksRowsAndReadsBackLogprobs) {
  auto kernels = make_cpu_kernels();
  Sampler sampler(*kernels);
  std::vector<float> logits = kLogits;
  for (float v : kLogits) logits.push_back(v * 2);
  Tensor t(logits.data(), DType::f32, {2, int64_t(kLogits.size())});
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.logprobs = true;
  greedy.top_logprobs = 2;
  SamplingParams biased = greedy;
  biased.logprobs = false;
  std::unordered_map<int32_t, SamplingAdjust> adjust{{9, SamplingAdjust{9, 0, 0, 5.f}}};
  std::vector<SampleRow> rows{{&greedy, 0, 0, 1, nullptr}, {&biased, 0, 0, 0, &adjust}};
  std::vector<SampledToken> out;
  sampler.sample(t, rows, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].token, 0);
  ASSERT_EQ(out[0].top_logprobs.size(), 2u);
  EXPECT_EQ(out[0].top_logprobs[1].first, 1);
  double z = 0;
  for (float v : kLogits) z += std::exp(2.0 * (double(v) - 2.0));
  EXPECT_NEAR(out[0].logprob, -std::log(z), 1e-5);
  EXPECT_EQ(out[1].token, 9);  // 0.25 + 5 beats 2.0
  EXPECT_TRUE(out[1].top_logprobs.empty());
}

}  // namespace
}  // namespace rill
