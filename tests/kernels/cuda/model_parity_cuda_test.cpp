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

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/model_runner.h"
#include "model/kv_buffers.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/step_batch.h"

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

// The spacing of bf16 values around x (8 significant bits).
double bf16_ulp(float x) {
  int e = 0;
  std::frexp(std::fabs(double(x)), &e);  // |x| = m·2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 8);
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
    std::vector<float> tops;
    for (size_t t = 0; t < ref.greedy_bf16[p].size(); ++t) {
      int32_t next = Runner::argmax(l.data(), run.vocab());
      generated.push_back(next);
      tops.push_back(l[size_t(next)]);
      l = run.step({{&seq, {next}, Logits::last}});
    }
    size_t decided = 0;
    const auto& margins = ref.greedy_bf16_margins[p];
    // A step is decided when the reference's margin exceeds two bf16 ulps of the top logit
    // (0.0625 in [4, 8), 0.125 in [8, 16)); our top logit stands in for the reference's.
    while (decided < margins.size() && margins[decided] > 2 * bf16_ulp(tops[decided])) ++decided;
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

// Qwen3.5 (hybrid Gated DeltaNet + gated attention) on the GPU with bf16 weights and activations.
// The fixtures carry transformers' fp32 logits, greedy continuation and margins but no bf16 run,
// and the tiny random hybrids are far less well conditioned than the dense ones: the CPU f32 path
// already moves some positions by 2.5e-4 through summation order alone (qwen35_parity_test), so
// bf16 roundings (2^-9 relative per op) move those logits by O(1). Fixed bounds tuned on the dense
// family do not apply, so the test measures how far bf16 rounding alone moves each logit: the
// CPU model run through a backend that rounds every activation op's output to bf16 (Bf16Rounding
// below, f32 maths otherwise). The GPU is then held to
//   - logits: ||gpu − f32|| ≤ 3·||emulated − f32|| + 1e-2 (relative to ||f32||) per prompt and over
//     32 teacher-forced decode steps: a second, independent set of roundings lands at the same
//     distance, not at the O(1) of a wrong kernel;
//   - greedy tokens: equal to transformers' fp32 greedy at every teacher-forced step where its
//     top-2 margin exceeds twice the emulation's largest logit shift at that step plus four bf16
//     ulps of the top logit (so bf16 noise cannot swap the pair), and free-running up to the
//     first step that is not so decided.
// The f32 stand-in for transformers' decode logits is the CPU backend (within 1e-3 of them).
class Bf16Rounding final : public Kernels {
 public:
  Bf16Rounding() : k_(make_cpu_kernels()) {}
  Device device() const override { return k_->device(); }
  DType activation_dtype() const override { return k_->activation_dtype(); }
  Allocator& allocator() override { return k_->allocator(); }
  void upload(const void* host, Tensor dst) override { k_->upload(host, dst); }
  void download(const Tensor& src, void* host) override { k_->download(src, host); }
  void synchronize() override { k_->synchronize(); }
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    k_->matmul(x, w, bias, y);
    round(y);
  }
  void rms_norm(const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) override {
    k_->rms_norm(x, w, p, y);
    round(y);
  }
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, const NormParams& p, Tensor& y) override {
    k_->add(residual, x, residual);
    round(residual);
    k_->rms_norm(residual, w, p, y);
    round(y);
  }
  void rope(Tensor& q, Tensor& k, const Tensor& positions, const RopeTable& table) override {
    k_->rope(q, k, positions, table);
    round(q);
    round(k);
  }
  void store_kv(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, KvLayer& cache) override {
    k_->store_kv(k, v, slot_mapping, cache);
  }
  void rope_store_kv(Tensor& q, Tensor& k, const Tensor& v, const AttentionBatch& batch, const RopeTable& table,
                     KvLayer& cache) override {
    rope(q, k, batch.positions, table);
    store_kv(k, v, batch.slot_mapping, cache);
  }
  void attention(const Tensor& q, const KvLayer& cache, const AttentionBatch& batch, const AttentionParams& p,
                 Tensor& out) override {
    k_->attention(q, cache, batch, p, out);
    round(out);
  }
  void swiglu(const Tensor& x, Tensor& y) override {
    k_->swiglu(x, y);
    round(y);
  }
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override {
    k_->embedding(ids, table, out);
    round(out);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    k_->add(a, b, out);
    round(out);
  }
  void gather_rows(const Tensor& x, const Tensor& index, Tensor& out) override { k_->gather_rows(x, index, out); }
  void argmax(const Tensor& x, Tensor& out) override { k_->argmax(x, out); }
  void softmax(const Tensor& x, Tensor& out) override { k_->softmax(x, out); }
  void convert(const Tensor& x, Tensor& out) override { k_->convert(x, out); }
  void sample(const SampleArgs& args) override { k_->sample(args); }
  void copy_kv_blocks(KvLayer& cache, const Tensor& src_dst) override { k_->copy_kv_blocks(cache, src_dst); }
  void causal_conv1d(const Tensor& x, const Tensor& w, const StateBatch& batch, Tensor& conv_state, Tensor& y,
                     bool silu) override {
    k_->causal_conv1d(x, w, batch, conv_state, y, silu);
    round(y);
  }
  void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                        const StateBatch& batch, Tensor& state, Tensor& out, const DeltaRuleParams& p) override {
    k_->gated_delta_rule(q, k, v, g, beta, batch, state, out, p);
    round(out);
  }
  void l2_norm(const Tensor& x, float eps, float scale, Tensor& y) override {
    k_->l2_norm(x, eps, scale, y);
    round(y);
  }
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) override {
    k_->gated_rms_norm(x, z, w, eps, y);
    round(y);
  }
  void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias, Tensor& g,
                 Tensor& beta) override {
    k_->gdn_gates(a, b, a_log, dt_bias, g, beta);
    round(beta);
  }
  void sigmoid_mul(const Tensor& x, const Tensor& gate, Tensor& out) override {
    k_->sigmoid_mul(x, gate, out);
    round(out);
  }

 private:
  static void round(const Tensor& t) {
    if (t.dtype() != DType::f32) return;
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = round_bf16(p[i]);
  }
  std::unique_ptr<Kernels> k_;
};

// Prefill logits of every prompt position, then the logits of `forced` teacher-forced decode steps
// (feeding the reference greedy tokens), on one backend: [(prompt + forced) * V].
std::vector<float> forced_logits(Kernels& kernels, const std::string& name, const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& greedy, size_t forced) {
  LoadOptions lo;
  lo.verbose = false;
  std::unique_ptr<Model> model = load_model(test::kFixtures + name, kernels, lo);
  constexpr int32_t kBlock = 16;
  KvBuffers kv(kernels, model->kv_spec(), 16, kBlock);
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < 16; ++b) blocks.push_back(b);
  auto step = [&](std::span<const int32_t> toks, int32_t start, Logits mode) {
    StepBatchBuilder b(kBlock);
    b.add_row(toks, start, blocks, mode);
    Tensor logits = model->forward(b.build(), kv.layers());
    std::vector<float> out(size_t(logits.numel()));
    if (logits.dtype() == DType::f32) {
      kernels.download(logits, out.data());
    } else {
      std::vector<bf16_t> raw(out.size());
      kernels.download(logits, raw.data());
      for (size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_f32(raw[i]);
    }
    return out;
  };
  std::vector<float> all = step(prompt, 0, Logits::all);
  for (size_t t = 0; t < forced; ++t) {
    std::vector<float> l = step(std::span(greedy).subspan(t, 1), int32_t(prompt.size() + t), Logits::last);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

class CudaQwen35Parity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
  }
};

std::vector<std::vector<double>> fp32_margins(const std::string& name) {
  std::ifstream in(test::kFixtures + name + "/reference.json");
  return nlohmann::json::parse(in)["greedy_margins"].get<std::vector<std::vector<double>>>();
}

double bf16_ulps4(const float* logits, int64_t vocab) {
  const float top = *std::max_element(logits, logits + vocab);
  return 4 * std::ldexp(1.0, int(std::floor(std::log2(std::max(std::fabs(double(top)), 1e-3)))) - 7);
}

float max_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::isnan(a[i]) ? INFINITY : std::fabs(a[i] - b[i]));
  return m;
}

TEST_P(CudaQwen35Parity, LogitsAndDecidedGreedySteps) {
  const Reference ref = load_reference(GetParam());
  const auto margins = fp32_margins(GetParam());
  constexpr size_t kForced = 32;
  auto cpu = make_cpu_kernels();
  auto gpu = make_cuda_kernels(0);
  Bf16Rounding emul;
  Runner run(GetParam(), std::nullopt, 16, /*cuda=*/true);
  const int64_t V = run.vocab();
  size_t compared_free = 0, compared_forced = 0;
  for (size_t p = 0; p < ref.prompts.size(); ++p) {
    SCOPED_TRACE(testing::Message() << "prompt " << p);
    const size_t n = ref.prompts[p].size();
    const std::vector<float> f32 = forced_logits(*cpu, GetParam(), ref.prompts[p], ref.greedy[p], kForced);
    const std::vector<float> em = forced_logits(emul, GetParam(), ref.prompts[p], ref.greedy[p], kForced);
    const std::vector<float> got = forced_logits(*gpu, GetParam(), ref.prompts[p], ref.greedy[p], kForced);
    ASSERT_EQ(got.size(), f32.size());
    // Our f32 prefill is transformers' (qwen35_parity_test); check it stands in faithfully here too.
    EXPECT_LE(max_diff(f32.data(), ref.logits[p].data(), int64_t(n) * V), 3e-3f);
    auto rel = [&](const std::vector<float>& a, size_t r0, size_t r1) {
      return relative_error(std::vector<float>(a.begin() + long(r0 * V), a.begin() + long(r1 * V)),
                            std::vector<float>(f32.begin() + long(r0 * V), f32.begin() + long(r1 * V)));
    };
    const double gp = rel(got, 0, n), ep = rel(em, 0, n), gd = rel(got, n, n + kForced), ed = rel(em, n, n + kForced);
    std::printf("[cuda qwen35] %s prompt %zu (%zu tokens): ||d||/||f32||: prefill gpu %.3g (bf16-rounded cpu %.3g), "
                "forced decode gpu %.3g (%.3g)\n",
                GetParam().c_str(), p, n, gp, ep, gd, ed);
    EXPECT_LE(gp, 3 * ep + 1e-2) << "prefill logits";
    EXPECT_LE(gd, 3 * ed + 1e-2) << "teacher-forced decode logits";
    // Step t's logits: prefill's last row for t = 0, else forced row n + t - 1.
    auto row = [&](const std::vector<float>& a, size_t t) { return a.data() + (t == 0 ? n - 1 : n + t - 1) * size_t(V); };
    std::vector<bool> decided(kForced);
    for (size_t t = 0; t < kForced; ++t) {
      const double noise = max_diff(row(em, t), row(f32, t), V);
      decided[t] = margins[p][t] > 2 * noise + bf16_ulps4(row(f32, t), V);
      if (!decided[t]) continue;
      ++compared_forced;
      EXPECT_EQ(Runner::argmax(row(got, t), V), ref.greedy[p][t])
          << "teacher-forced step " << t << " (reference margin " << margins[p][t] << ", bf16 shift " << noise << ")";
    }
    Seq seq;
    std::vector<float> l = run.step({{&seq, ref.prompts[p], Logits::last}});
    for (size_t t = 0; t < kForced && decided[t]; ++t, ++compared_free) {
      const int32_t next = Runner::argmax(l.data(), V);
      ASSERT_EQ(next, ref.greedy[p][t]) << "free-running step " << t;
      l = run.step({{&seq, {next}, Logits::last}});
    }
  }
  std::printf("[cuda qwen35] %s: %zu free-running and %zu teacher-forced decided steps compared\n",
              GetParam().c_str(), compared_free, compared_forced);
  EXPECT_GT(compared_forced, 0u);
}

// Rows batched together (prefill, then teacher-forced decode one token per row per step) give
// each row the logits it gets alone, up to bf16 rounding of differently shaped matmuls: a row
// reading another row's recurrent state would be off by O(1).
TEST_P(CudaQwen35Parity, BatchedRowsMatchSingleRows) {
  const Reference ref = load_reference(GetParam());
  const size_t n = ref.prompts.size();
  constexpr size_t kSteps = 12;
  std::vector<std::vector<float>> alone(n);  // per row: prefill last logits, then each decode step's
  {
    Runner run(GetParam(), std::nullopt, 16, true);
    for (size_t p = 0; p < n; ++p) {
      Seq seq;
      alone[p] = run.step({{&seq, ref.prompts[p], Logits::last}});
      for (size_t t = 0; t < kSteps; ++t) {
        std::vector<float> l = run.step({{&seq, {ref.greedy[p][t]}, Logits::last}});
        alone[p].insert(alone[p].end(), l.begin(), l.end());
      }
    }
  }
  Runner run(GetParam(), std::nullopt, 16, true);
  const size_t V = size_t(run.vocab());
  std::vector<Seq> seqs(n);
  std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> rows;
  for (size_t p = 0; p < n; ++p) rows.emplace_back(&seqs[p], ref.prompts[p], Logits::last);
  std::vector<std::vector<float>> together(n);
  std::vector<float> l = run.step(rows);
  for (size_t t = 0; t <= kSteps; ++t) {
    for (size_t p = 0; p < n; ++p) together[p].insert(together[p].end(), l.begin() + long(p * V), l.begin() + long((p + 1) * V));
    if (t == kSteps) break;
    rows.clear();
    for (size_t p = 0; p < n; ++p) rows.emplace_back(&seqs[p], std::vector<int32_t>{ref.greedy[p][t]}, Logits::last);
    l = run.step(rows);
  }
  for (size_t p = 0; p < n; ++p) EXPECT_LT(relative_error(together[p], alone[p]), 1e-2) << "row " << p;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaQwen35Parity, ::testing::Values("qwen35-tiny", "qwen35-vlm-tied", "qwen35-moe-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace rill
