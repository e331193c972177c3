// Decode step graphs on the GPU (label cuda): a step replayed from its graph gives bitwise the
// logits of the same step run eagerly; decoding through graphs follows the eager model over
// changing batch sizes and context widths; a graph is never replayed against other KV buffers;
// steps queued ahead of the host (their ids fed on the device) compute what the same steps
// compute one at a time.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "common/model_runner.h"
#include "model/decode_graphs.h"

namespace rill {
namespace {
using test::load_reference;
using test::Reference;
using test::Runner;
using test::Seq;

class DecodeGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
  }
};

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Row r's long prompt: the fixture's prompt r (mod their count) repeated to at least `min_len` tokens.
std::vector<int32_t> long_prompt(const Reference& ref, size_t r, size_t min_len) {
  std::vector<int32_t> prompt;
  const auto& p = ref.prompts[r % ref.prompts.size()];
  while (prompt.size() < min_len) prompt.insert(prompt.end(), p.begin(), p.end());
  return prompt;
}

TEST(DecodeGraphBuckets, PowersOfTwoUpTo256) {
  EXPECT_EQ(DecodeGraphs::bucket_for(1), 1);
  EXPECT_EQ(DecodeGraphs::bucket_for(3), 4);
  EXPECT_EQ(DecodeGraphs::bucket_for(17), 32);
  EXPECT_EQ(DecodeGraphs::bucket_for(256), 256);
}

// The same decode step three times (it rewrites the same K/V slots with the same values): run
// eagerly (first step of its shape), recorded and replayed (second), replayed (third).
TEST_F(DecodeGraph, ReplayEqualsEagerBitwise) {
  const Reference ref = load_reference("qwen3-tiny");
  for (size_t rows : {size_t(1), size_t(3)}) {
    Runner run("qwen3-tiny", std::nullopt, 16, /*cuda=*/true);
    std::vector<Seq> seqs(rows);
    std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> prefill;
    for (size_t r = 0; r < rows; ++r) prefill.emplace_back(&seqs[r], ref.prompts[r % ref.prompts.size()], Logits::last);
    run.step(prefill);
    std::vector<std::vector<float>> outs;
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> step;
      for (size_t r = 0; r < rows; ++r) step.emplace_back(&seqs[r], std::vector<int32_t>{int32_t(7 + r)}, Logits::last);
      outs.push_back(run.step(step));
      for (Seq& s : seqs) s.len -= 1;  // the same positions again
    }
    EXPECT_TRUE(bitwise_equal(outs[0], outs[1])) << rows << " rows: recorded step differs from the eager one";
    EXPECT_TRUE(bitwise_equal(outs[0], outs[2])) << rows << " rows: replay differs from the eager step";
  }
}

// 40 greedy steps of 1, then 3, then 5 rows (buckets 1, 4, 8), contexts crossing the first block
// table width class (16 blocks = 256 tokens): the graph model follows the eager model.
TEST_F(DecodeGraph, FollowsEagerAcrossBucketsAndWidths) {
  const Reference ref = load_reference("qwen3-tiny");
  Runner eager("qwen3-tiny", std::nullopt, 16, true, 256, /*cuda_graphs=*/false);
  Runner graph("qwen3-tiny", std::nullopt, 16, true, 256, /*cuda_graphs=*/true);
  const int64_t V = eager.vocab();
  for (size_t rows : {size_t(1), size_t(3), size_t(5)}) {
    std::vector<Seq> se(rows), sg(rows);
    std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> pe, pg;
    for (size_t r = 0; r < rows; ++r) {
      // Long prompts: the prompt repeated up to ~230 tokens so that decoding crosses 256.
      const std::vector<int32_t> prompt = long_prompt(ref, r, 200 + 10 * r);
      pe.emplace_back(&se[r], prompt, Logits::last);
      pg.emplace_back(&sg[r], prompt, Logits::last);
    }
    std::vector<float> le = eager.step(pe), lg = graph.step(pg);
    float worst = 0;
    int same = 0, total = 0;
    for (int t = 0; t < 40; ++t) {
      std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> ne, ng;
      worst = std::max(worst, test::max_abs_diff(le, lg.data(), le.size()));
      for (size_t r = 0; r < rows; ++r) {
        const int32_t te = Runner::argmax(le.data() + r * size_t(V), V);
        const int32_t tg = Runner::argmax(lg.data() + r * size_t(V), V);
        same += te == tg;
        ++total;
        // Both follow the eager model's tokens so that the contexts stay equal.
        ne.emplace_back(&se[r], std::vector<int32_t>{te}, Logits::last);
        ng.emplace_back(&sg[r], std::vector<int32_t>{te}, Logits::last);
      }
      le = eager.step(ne);
      lg = graph.step(ng);
    }
    std::printf("[decode graph] %zu rows: max |dlogit| %.4g vs eager, %d/%d same argmax\n", rows, worst, same, total);
    // bf16 logits of order 1-10: differences beyond a few ulps mean a wrong input or a stale graph.
    EXPECT_LT(worst, 0.25f) << rows << " rows";
    for (Seq& s : se) s.len = 0;  // (sequences are dropped; the pools are large enough)
  }
}

// Greedy decode of 3 rows (bucket 4) through graphs with each step's ids fed on the device from
// the previous step's argmax (StepBatch::token_source; the host passes placeholder ids 0): bitwise
// the logits of the same graphs fed by the host.
TEST_F(DecodeGraph, DeviceFedTokensEqualHostFed) {
  const Reference ref = load_reference("qwen3-tiny");
  Runner host("qwen3-tiny", std::nullopt, 16, true, 64, /*cuda_graphs=*/true);
  Runner device("qwen3-tiny", std::nullopt, 16, true, 64, /*cuda_graphs=*/true);
  const int64_t V = host.vocab();
  constexpr size_t kRows = 3;
  Buffer ids_buffer(device.kernels().allocator(), kRows * sizeof(int32_t));
  Tensor ids = ids_buffer.as(DType::i32, {int64_t(kRows)});
  Buffer logits_buffer(device.kernels().allocator(), kRows * size_t(V) * sizeof(float));
  Tensor logits = logits_buffer.as(DType::f32, {int64_t(kRows), V});
  std::vector<Seq> hs(kRows), ds(kRows);
  std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> ph, pd;
  for (size_t r = 0; r < kRows; ++r) {
    ph.emplace_back(&hs[r], ref.prompts[r % ref.prompts.size()], Logits::last);
    pd.emplace_back(&ds[r], ref.prompts[r % ref.prompts.size()], Logits::last);
  }
  std::vector<float> lh = host.step(ph), ld = device.step(pd);
  for (int t = 0; t < 20; ++t) {
    std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> nh, nd;
    for (size_t r = 0; r < kRows; ++r) {
      nh.emplace_back(&hs[r], std::vector<int32_t>{Runner::argmax(lh.data() + r * size_t(V), V)}, Logits::last);
      nd.emplace_back(&ds[r], std::vector<int32_t>{0}, Logits::last);
    }
    device.kernels().upload(ld.data(), logits);
    device.kernels().argmax(logits, ids);
    lh = host.step(nh);
    ld = device.step(nd, &ids);
    ASSERT_TRUE(bitwise_equal(lh, ld)) << "step " << t;
  }
}

// Greedy decode as `rill bench` and the engine queue it: each step queued before the previous
// one's ids are read (they reach it on the device from two alternating id buffers), no host
// synchronisation between steps; every step's logits copied aside on the device and read once at
// the end. They must equal bitwise the logits of the same steps run one at a time with host-fed
// ids. 1 and 4 rows fill their bucket, 3 rows are padded to 4; prompts of ~240 tokens make the
// decode cross the first block-table width class (256 tokens), which grows the graphs' arena
// mid-run.
TEST_F(DecodeGraph, QueuedDeviceFedStepsEqualStepsOneAtATime) {
  const Reference ref = load_reference("qwen3-tiny");
  constexpr int kSteps = 40;
  for (size_t rows : {size_t(1), size_t(3), size_t(4)}) {
    Runner synced("qwen3-tiny", std::nullopt, 16, true, 256, /*cuda_graphs=*/true);
    Runner queued("qwen3-tiny", std::nullopt, 16, true, 256, /*cuda_graphs=*/true);
    const int64_t V = synced.vocab();
    Kernels& k = queued.kernels();
    std::vector<Seq> ss(rows), qs(rows);
    std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> ps, pq;
    for (size_t r = 0; r < rows; ++r) {
      std::vector<int32_t> prompt = long_prompt(ref, r, 236 + 3 * r);
      prompt.resize(236 + 3 * r);
      ps.emplace_back(&ss[r], prompt, Logits::last);
      pq.emplace_back(&qs[r], prompt, Logits::last);
    }
    std::vector<float> ls = synced.step(ps);
    const std::vector<float> first = queued.step(pq);
    ASSERT_TRUE(bitwise_equal(ls, first)) << rows << " rows: prefill";

    // One at a time: the host reads each step's logits and feeds their argmax.
    std::vector<std::vector<float>> expected;
    for (int t = 0; t < kSteps; ++t) {
      std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> next;
      for (size_t r = 0; r < rows; ++r)
        next.emplace_back(&ss[r], std::vector<int32_t>{Runner::argmax(ls.data() + r * size_t(V), V)}, Logits::last);
      ls = synced.step(next);
      expected.push_back(ls);
    }

    // Queued: step t's ids are step t - 1's argmax on the device; nothing waits until the end.
    const size_t id_bytes = rows * sizeof(int32_t);
    Buffer id_buffers[2] = {Buffer(k.allocator(), id_bytes), Buffer(k.allocator(), id_bytes)};
    std::unique_ptr<Readback> readbacks[2] = {k.make_readback(id_bytes), k.make_readback(id_bytes)};
    Buffer saved(k.allocator(), size_t(kSteps) * rows * size_t(V) * sizeof(bf16_t));
    const Tensor all_logits = saved.as(DType::bf16, {int64_t(kSteps) * int64_t(rows), V});  // step t's rows at t·rows
    std::vector<int32_t> host_ids(rows);
    for (size_t r = 0; r < rows; ++r) host_ids[r] = Runner::argmax(first.data() + r * size_t(V), V);
    for (int t = 0; t < kSteps; ++t) {
      std::vector<std::tuple<Seq*, std::vector<int32_t>, Logits>> next;
      for (size_t r = 0; r < rows; ++r)
        next.emplace_back(&qs[r], std::vector<int32_t>{t == 0 ? host_ids[r] : 0}, Logits::last);
      Tensor fed = id_buffers[(t + 1) % 2].as(DType::i32, {int64_t(rows)});
      Tensor logits = queued.queue(next, t == 0 ? nullptr : &fed);
      ASSERT_EQ(logits.dtype(), DType::bf16);
      Tensor picked = id_buffers[t % 2].as(DType::i32, {int64_t(rows)});
      k.argmax(logits, picked);
      readbacks[t % 2]->start(picked);
      Tensor aside = all_logits.slice(int64_t(t) * int64_t(rows), int64_t(t + 1) * int64_t(rows));
      k.copy(logits, aside);
      if (t > 0) readbacks[(t - 1) % 2]->wait();  // as a decode loop reads the previous step's ids
    }
    const std::vector<float> got = queued.to_host(all_logits);
    for (int t = 0; t < kSteps; ++t) {
      const std::vector<float> step(got.begin() + std::ptrdiff_t(size_t(t) * rows * size_t(V)),
                                    got.begin() + std::ptrdiff_t(size_t(t + 1) * rows * size_t(V)));
      ASSERT_TRUE(bitwise_equal(expected[size_t(t)], step)) << rows << " rows: queued step " << t << " differs";
    }
  }
}

}  // namespace
}  // namespace rill
