// Dense-family parity against transformers (tests/fixtures/models, TESTING.md): fp32 CPU logits
// within 1e-3 of the reference, identical 32-token greedy continuations, a multi-row batch that
// gives exactly the per-row results, chunked prefill mixed with decode rows, and bf16 weights
// giving the same greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/model_runner.h"
#include "core/error.h"

namespace rill {
namespace {
using test::kFixtures;
using test::load_reference;
using test::max_abs_diff;
using test::Reference;
using test::Runner;
using test::Seq;


class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, SingleRowLogitsAndGreedy) {
  const Reference ref = load_reference(GetParam());
  Runner run(GetParam(), std::nullopt, 16);
  for (size_t p = 0; p < ref.prompts.size(); ++p) {
    Seq seq;
    std::vector<float> logits = run.step({{&seq, ref.prompts[p], Logits::all}});
    ASSERT_EQ(logits.size(), ref.logits[p].size());
    float diff = max_abs_diff(ref.logits[p], logits.data(), logits.size());
    std::printf("[parity] %s prompt %zu (%zu tokens): max |dlogit| = %.3g\n", GetParam().c_str(), p,
                ref.prompts[p].size(), diff);
    EXPECT_LE(diff, 1e-3f) << "prompt " << p;
    std::vector<int32_t> generated;
    int32_t next = Runner::argmax(logits.data() + logits.size() - size_t(run.vocab()), run.vocab());
    for (size_t t = 0; t < ref.greedy[p].size(); ++t) {
      generated.push_back(next);
      std::vector<float> l = run.step({{&seq, {next}, Logits::last}});
      next = Runner::argmax(l.data(), run.vocab());
    }
    EXPECT_EQ(generated, ref.greedy[p]) << "prompt " << p;
  }
}

TEST_P(Parity, MultiRowBatchEqualsSingleRows) {
  const Reference ref = load_reference(GetParam());
  const size_t n = ref.prompts.size();
  // Alone, one row per step (small blocks so tables are long and interleaved in the pool).
  std::vector<std::vector<float>> alone;
  {
    Runner run(GetParam(), std::nullopt, 4);
    for (size_t p = 0; p < n; ++p) {
      Seq seq;
      alone.push_back(run.step({{&seq, ref.prompts[p], Logits::all}}));
    }
  }
  Runner run(GetParam(), std::nullopt, 4);
  std::vector<Seq> seqs(n);
  std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> rows;
  for (size_t p = 0; p < n; ++p) rows.emplace_back(&seqs[p], ref.prompts[p], Logits::all);
  std::vector<float> batched = run.step(rows);
  size_t offset = 0;
  for (size_t p = 0; p < n; ++p) {
    ASSERT_LE(offset + alone[p].size(), batched.size());
    EXPECT_EQ(0, std::memcmp(alone[p].data(), batched.data() + offset, alone[p].size() * 4))
        << "row " << p << " differs from its single-row run";
    float diff = max_abs_diff(ref.logits[p], batched.data() + offset, alone[p].size());
    EXPECT_LE(diff, 1e-3f);
    offset += alone[p].size();
  }
  // Batched greedy decode: every row advances one token per step.
  std::vector<int32_t> next(n);
  std::vector<std::vector<int32_t>> generated(n);
  offset = 0;
  for (size_t p = 0; p < n; ++p) {
    offset += alone[p].size();
    next[p] = Runner::argmax(batched.data() + offset - size_t(run.vocab()), run.vocab());
  }
  for (size_t t = 0; t < ref.greedy[0].size(); ++t) {
    rows.clear();
    for (size_t p = 0; p < n; ++p) {
      generated[p].push_back(next[p]);
      rows.emplace_back(&seqs[p], std::vector<int32_t>{next[p]}, Logits::last);
    }
    std::vector<float> l = run.step(rows);
    for (size_t p = 0; p < n; ++p) next[p] = Runner::argmax(l.data() + p * size_t(run.vocab()), run.vocab());
  }
  for (size_t p = 0; p < n; ++p) EXPECT_EQ(generated[p], ref.greedy[p]) << "row " << p;
}

TEST_P(Parity, ChunkedPrefillMixedWithDecode) {
  const Reference ref = load_reference(GetParam());
  Runner run(GetParam(), std::nullopt, 16);
  // Row A: prompt 0, then decodes. Row B: prompt 2 in chunks of 5 tokens in the same steps.
  Seq a, b;
  std::vector<float> la = run.step({{&a, ref.prompts[0], Logits::last}});
  int32_t next_a = Runner::argmax(la.data(), run.vocab());
  std::vector<int32_t> gen_a;
  const std::vector<int32_t>& pb = ref.prompts[2];
  size_t done = 0;
  std::vector<float> last_b;
  while (done < pb.size()) {
    size_t n = std::min<size_t>(5, pb.size() - done);
    std::vector<int32_t> chunk(pb.begin() + long(done), pb.begin() + long(done + n));
    gen_a.push_back(next_a);
    std::vector<float> l = run.step({{&a, {next_a}, Logits::last}, {&b, chunk, Logits::all}});
    next_a = Runner::argmax(l.data(), run.vocab());
    // Row B's logits for this chunk must match the reference at those positions.
    for (size_t i = 0; i < n; ++i) {
      float diff = max_abs_diff(std::vector<float>(l.begin() + long((1 + i) * size_t(run.vocab())),
                                                   l.begin() + long((2 + i) * size_t(run.vocab()))),
                                ref.logits[2].data() + (done + i) * size_t(run.vocab()), size_t(run.vocab()));
      EXPECT_LE(diff, 1e-3f) << "chunked row, position " << done + i;
    }
    done += n;
  }
  std::vector<int32_t> expect_a(ref.greedy[0].begin(), ref.greedy[0].begin() + long(gen_a.size()));
  EXPECT_EQ(gen_a, expect_a);
}

TEST_P(Parity, Bf16WeightsGiveTheSameGreedyTokens) {
  const Reference ref = load_reference(GetParam());
  Runner run(GetParam(), DType::bf16, 16);
  for (size_t p = 0; p < ref.prompts.size(); ++p) {
    Seq seq;
    std::vector<float> all = run.step({{&seq, ref.prompts[p], Logits::all}});
    // The fixture weights are bf16 values stored as f32, so bf16 storage loses nothing: the
    // logits must match the f32 reference as tightly as the f32 run does.
    float diff = max_abs_diff(ref.logits[p], all.data(), all.size());
    std::printf("[parity] %s bf16 weights, prompt %zu: max |dlogit| = %.3g\n", GetParam().c_str(), p, diff);
    EXPECT_LE(diff, 1e-3f);
    std::vector<float> l(all.end() - run.vocab(), all.end());
    std::vector<int32_t> generated;
    for (size_t t = 0; t < ref.greedy[p].size(); ++t) {
      int32_t next = Runner::argmax(l.data(), run.vocab());
      generated.push_back(next);
      l = run.step({{&seq, {next}, Logits::last}});
    }
    EXPECT_EQ(generated, ref.greedy[p]) << "prompt " << p;
  }
}

// Decode with each step's token taken on the device from the previous step's argmax
// (StepBatch::token_source; the host passes a placeholder id 0): bitwise the logits of the steps
// the host feeds, and the reference's greedy tokens.
TEST_P(Parity, DeviceFedTokensEqualHostFed) {
  const Reference ref = load_reference(GetParam());
  Runner host(GetParam(), std::nullopt, 16), device(GetParam(), std::nullopt, 16);
  Buffer ids_buffer(device.kernels().allocator(), sizeof(int32_t));
  Tensor ids = ids_buffer.as(DType::i32, {1});
  Seq hs, ds;
  std::vector<float> lh = host.step({{&hs, ref.prompts[0], Logits::last}});
  std::vector<float> ld = device.step({{&ds, ref.prompts[0], Logits::last}});
  std::vector<int32_t> generated;
  for (size_t t = 0; t < ref.greedy[0].size(); ++t) {
    const int32_t next = Runner::argmax(lh.data(), host.vocab());
    generated.push_back(next);
    lh = host.step({{&hs, {next}, Logits::last}});
    // The other run picks its token with the backend's argmax and feeds it on the device.
    Buffer lbuf(device.kernels().allocator(), ld.size() * sizeof(float));
    Tensor l = lbuf.as(DType::f32, {1, int64_t(ld.size())});
    device.kernels().upload(ld.data(), l);
    device.kernels().argmax(l, ids);
    ld = device.step({{&ds, {0}, Logits::last}}, &ids);
    ASSERT_EQ(lh.size(), ld.size());
    ASSERT_EQ(std::memcmp(lh.data(), ld.data(), lh.size() * sizeof(float)), 0) << "step " << t;
  }
  EXPECT_EQ(generated, ref.greedy[0]);
  // A token source that is not i32, or holds more ids than the step has tokens, is refused by name.
  Buffer bad_buffer(device.kernels().allocator(), 2 * sizeof(float));
  for (const Tensor& bad : {bad_buffer.as(DType::f32, {2}), bad_buffer.as(DType::i32, {2})}) {
    try {
      device.step({{&ds, {0}, Logits::last}}, &bad);
      ADD_FAILURE() << "token_source " << bad.describe() << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token_source"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity,
                         ::testing::Values("qwen3-tiny", "qwen3-yarn-tied", "llama3-tiny", "qwen2-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace rill
