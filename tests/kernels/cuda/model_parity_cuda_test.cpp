// The dense family on the GPU (label cuda): the golden fixtures run with bf16 weights and
// activations must give the greedy continuation transformers gives in bf16 on the GPU, logits
// close to the f32 reference, and a multi-row batch the same tokens as single rows.
//
// Tolerances, and why: every op of a bf16 forward rounds its output to 8 mantissa bits, so over
// the fixtures' 3 layers the logits differ from the f32 reference by about 1–2% relative
// (measured 1.1–1.9% on an H200); a wrong kernel gives errors of order 1, so 3e-2 still
// separates right from wrong. The tiny random models put their top two logits within a bf16
// rounding of each other at many steps (transformers' own bf16 margins are exactly 0 there), so
// the continuation is compared up to the first step where the reference's margin is at most two
// bf16 ulps of its top logit: before that, a correct bf16 implementation must pick the same
// token; after it, the reference's choice rests on its rounding order, not on the model.
#include <gtest/gtest.h>

#include <cmath>

#include "common/model_runner.h"

namespace rill {
namespace {
using test::load_reference;
using test::Reference;
using test::Runner;
using test::Seq;

class CudaParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
  }
};

double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = double(got[i]) - double(ref[i]);
    if (std::isnan(got[i])) return INFINITY;
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

TEST_P(CudaParity, LogitsAndGreedyBf16) {
  const Reference ref = load_reference(GetParam());
  ASSERT_FALSE(ref.greedy_bf16.empty()) << "fixture lacks greedy_bf16 (regenerate with tools/make_model_fixtures.py on a GPU)";
  Runner run(GetParam(), std::nullopt, 16, /*cuda=*/true);
  for (size_t p = 0; p < ref.prompts.size(); ++p) {
    Seq seq;
    std::vector<float> all = run.step({{&seq, ref.prompts[p], Logits::all}});
    double rel = relative_error(all, ref.logits[p]);
    std::printf("[cuda parity] %s prompt %zu: ||dlogits||/||ref|| = %.3g\n", GetParam().c_str(), p, rel);
    EXPECT_LT(rel, 3e-2);
    std::vector<float> l(all.end() - run.vocab(), all.end());
    std::vector<int32_t> generated;
    for (size_t t = 0; t < ref.greedy_bf16[p].size(); ++t) {
      int32_t next = Runner::argmax(l.data(), run.vocab());
      generated.push_back(next);
      l = run.step({{&seq, {next}, Logits::last}});
    }
    size_t decided = 0;
    const auto& margins = ref.greedy_bf16_margins[p];
    // Two bf16 ulps for top logits in [4, 8), where the fixtures' top logits lie.
    constexpr double kTieMargin = 0.0625;
    while (decided < margins.size() && margins[decided] > kTieMargin) ++decided;
    std::vector<int32_t> got(generated.begin(), generated.begin() + long(decided));
    std::vector<int32_t> want(ref.greedy_bf16[p].begin(), ref.greedy_bf16[p].begin() + long(decided));
    std::printf("[cuda parity] %s prompt %zu: %zu decided steps compared\n", GetParam().c_str(), p, decided);
    EXPECT_EQ(got, want) << "prompt " << p;
  }
}

TEST_P(CudaParity, BatchedDecodeEqualsSingleRows) {
  const Reference ref = load_reference(GetParam());
  const size_t n = ref.prompts.size();
  std::vector<std::vector<int32_t>> alone(n);
  {
    Runner run(GetParam(), std::nullopt, 16, true);
    for (size_t p = 0; p < n; ++p) {
      Seq seq;
      std::vector<float> l = run.step({{&seq, ref.prompts[p], Logits::last}});
      for (int t = 0; t < 16; ++t) {
        alone[p].push_back(Runner::argmax(l.data(), run.vocab()));
        l = run.step({{&seq, {alone[p].back()}, Logits::last}});
      }
    }
  }
  Runner run(GetParam(), std::nullopt, 16, true);
  std::vector<Seq> seqs(n);
  std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> rows;
  for (size_t p = 0; p < n; ++p) rows.emplace_back(&seqs[p], ref.prompts[p], Logits::last);
  std::vector<float> l = run.step(rows);
  std::vector<std::vector<int32_t>> together(n);
  for (int t = 0; t < 16; ++t) {
    rows.clear();
    for (size_t p = 0; p < n; ++p) {
      together[p].push_back(Runner::argmax(l.data() + p * size_t(run.vocab()), run.vocab()));
      rows.emplace_back(&seqs[p], std::vector<int32_t>{together[p].back()}, Logits::last);
    }
    l = run.step(rows);
  }
  for (size_t p = 0; p < n; ++p) EXPECT_EQ(together[p], alone[p]) << "row " << p;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity,
                         ::testing::Values("qwen3-tiny", "qwen3-yarn-tied", "llama3-tiny", "qwen2-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace rill
