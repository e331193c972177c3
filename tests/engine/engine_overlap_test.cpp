// Overlapped engine steps (EngineOptions::overlap_steps): each step is launched before the previous
// one's ids are read, the ids fed on the device. The same requests must give the same events bit
// for bit as one step at a time, under stops, lengths, logprobs, forks, penalties, preemption,
// prefix caching and cancellation; the only cost is one dropped row per sequence that stops.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

// The mixed requests (greedy and seeded sampling) with stop tokens and logprobs added on some;
// `host_fed`: also penalties, bias and a fork (n = 2).
std::vector<Request> overlap_requests(int count, uint32_t seed, bool host_fed) {
  std::vector<Request> out = mixed_requests(count, 1000, seed, 100);
  std::mt19937 rng(seed + 1);
  for (size_t i = 0; i < out.size(); ++i) {
    Request& r = out[i];
    if (!host_fed) {
      r.sampling.repetition_penalty = 1.f;
      r.sampling.frequency_penalty = 0.f;
      r.sampling.logit_bias.clear();
    }
    if (i % 3 == 0) {  // ids drawn often enough by the tiny random model that some requests stop on them
      for (int k = 0; k < 40; ++k) r.stop_token_ids.push_back(int32_t(rng() % 1000u));
    }
    if (i % 5 == 1) {
      r.sampling.logprobs = true;
      r.sampling.top_logprobs = 3;
    }
    if (i == 4 && host_fed) r.sampling.n = 2;
    if (i % 4 == 2 && host_fed) {  // greedy with strong penalties: the last draw decides the next pick
      r.sampling.presence_penalty = 2.f;
      r.sampling.frequency_penalty = 2.f;
    }
  }
  return out;
}

std::vector<RequestResult> run_with(Model& model, EngineOptions o, bool overlap, const std::vector<Request>& requests,
                                    EngineStats* stats = nullptr) {
  o.overlap_steps = overlap ? EngineOptions::Overlap::on : EngineOptions::Overlap::off;
  EngineCore core(model, o);
  EXPECT_EQ(core.overlaps_steps(), overlap);
  std::vector<RequestResult> out = run_core(core, requests);
  if (stats) *stats = core.stats();
  return out;
}

void expect_same_events(const std::vector<RequestResult>& got, const std::vector<RequestResult>& want,
                        const std::string& what) {
  expect_same_tokens(got, want, what);
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << what << ": request " << i;
    EXPECT_EQ(got[i].top_logprobs, want[i].top_logprobs) << what << ": request " << i;
    EXPECT_EQ(got[i].cached_tokens, want[i].cached_tokens) << what << ": request " << i;
  }
}

TEST(EngineOverlap, SameEventsAsOneStepAtATime) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const std::vector<Request> requests = overlap_requests(24, 31, false);
  const size_t block_bytes = m.model->kv_spec().bytes_per_block(16);
  struct Case {
    const char* what;
    size_t kv_bytes;
    bool prefix;
    int32_t budget;
  };
  for (const Case& c : {Case{"roomy, prefix cache", size_t(8) << 20, true, 2048},
                        Case{"roomy, no prefix cache", size_t(8) << 20, false, 2048},
                        Case{"8 blocks (preemption), chunks of 64", 8 * block_bytes, true, 64}}) {
    EngineOptions o = small_options(c.kv_bytes);
    o.prefix_caching = c.prefix;
    o.max_num_batched_tokens = c.budget;
    EngineStats on, off;
    const std::vector<RequestResult> want = run_with(*m.model, o, false, requests, &off);
    const std::vector<RequestResult> got = run_with(*m.model, o, true, requests, &on);
    expect_same_events(got, want, c.what);
    EXPECT_EQ(off.steps_overlapped, 0) << c.what;
    EXPECT_GT(on.steps_overlapped, on.num_steps / 3) << c.what;  // most steps overlap
    EXPECT_EQ(on.generated_tokens, off.generated_tokens) << c.what;
    if (c.budget == 64) {
      EXPECT_GT(on.num_preemptions, 0) << c.what;
    }
  }
  // Penalties (the pending draw counted on the device) and a fork (its first draw read at once).
  const std::vector<Request> mixed = overlap_requests(24, 32, true);
  EngineStats on;
  expect_same_events(run_with(*m.model, small_options(), true, mixed, &on),
                     run_with(*m.model, small_options(), false, mixed), "penalties and a fork");
  EXPECT_LT(on.steps_overlapped, on.num_steps);
  EXPECT_GT(on.steps_overlapped, on.num_steps / 3);
  int stopped = 0;
  for (const RequestResult& r : run_with(*m.model, small_options(), true, requests))
    for (FinishReason f : r.finish) stopped += f == FinishReason::stop;
  EXPECT_GT(stopped, 0) << "no request stopped on a stop token: the case is not exercised";
}

// A sequence that draws a stop token has already been given a row in the step launched before the
// draw was read: that row is computed and dropped (one token); one that ends by length never gets
// a row past its last draw.
TEST(EngineOverlap, OnlyAStopCostsOneDroppedRow) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const Reference ref = load_reference("qwen3-tiny");
  Request by_length = make_request(ref.prompts[1], 9);
  Request by_stop = make_request(ref.prompts[1], 32);
  by_stop.stop_token_ids = {ref.greedy[1][6]};
  for (const Request& r : {by_length, by_stop}) {
    EngineStats on, off;
    const RequestResult want = run_with(*m.model, small_options(), false, {r}, &off)[0];
    const RequestResult got = run_with(*m.model, small_options(), true, {r}, &on)[0];
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.finish, want.finish);
    const bool stops = want.finish[0] == FinishReason::stop;
    // The dropped row is a step of its own here (one sequence); it is not counted as computed.
    EXPECT_EQ(on.num_steps, off.num_steps + (stops ? 1 : 0)) << (stops ? "stop" : "length");
    EXPECT_EQ(on.computed_tokens, off.computed_tokens);
    EXPECT_GT(on.steps_overlapped, 0);
  }
}

// The CPU backend computes a step inside its launch: overlap would only publish tokens a step late.
TEST(EngineOverlap, AutomaticIsOffOnTheCpu) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  EngineOptions o = small_options();
  o.overlap_steps = EngineOptions::Overlap::automatic;
  EngineCore core(*m.model, o);
  EXPECT_FALSE(core.overlaps_steps());
}

// A bias makes greedy decoding repeat token 500 until its frequency penalty outweighs the bias: the
// run ends at the same step only if every penalty counted the draw still in flight (the device's
// pending id); counted a step late, 500 comes once more.
TEST(EngineOverlap, PenaltiesCountTheDrawInFlight) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const Reference ref = load_reference("qwen3-tiny");
  Request r = make_request(ref.prompts[2], 40);
  r.sampling.logit_bias = {{500, 30.f}};
  r.sampling.frequency_penalty = 2.f;
  EngineStats on;
  const RequestResult want = run_with(*m.model, small_options(), false, {r})[0];
  const RequestResult got = run_with(*m.model, small_options(), true, {r}, &on)[0];
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_GT(on.steps_overlapped, 30);
  const std::vector<int32_t>& t = want.tokens[0];
  size_t run = 0;
  while (run < t.size() && t[run] == 500) ++run;
  EXPECT_GE(run, 3u);          // the bias wins at first...
  EXPECT_LT(run, t.size());    // ...and the penalty later
}

// A step with prompt chunks is launched only after the previous step is read; a sequence that drew
// its stop token there has a row in the step already planned, and must not run it: its blocks are
// gone. Here one request decodes to a stop while another's long prompt is prefilled in chunks.
TEST(EngineOverlap, StopReadBeforeAChunkedStepDropsItsRow) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const Reference ref = load_reference("qwen3-tiny");
  std::mt19937 rng(13);
  Request stops = make_request(ref.prompts[1], 32);
  stops.stop_token_ids = {ref.greedy[1][3]};
  Request chunked = make_request(random_tokens(rng, 200, 1000), 8);
  EngineOptions o = small_options();
  o.max_num_batched_tokens = 32;  // the 200-token prompt takes 7 steps, each beside the decode row
  EngineStats on;
  const std::vector<RequestResult> want = run_with(*m.model, o, false, {stops, chunked});
  const std::vector<RequestResult> got = run_with(*m.model, o, true, {stops, chunked}, &on);
  expect_same_events(got, want, "a stop beside prompt chunks");
  EXPECT_EQ(want[0].finish[0], FinishReason::stop);
  EXPECT_LE(want[0].tokens[0].size(), 4u);  // it stopped while the other prompt was still in chunks
}

TEST(EngineOverlap, CancelWhileAStepIsInFlight) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::mt19937 rng(12);
  Request a = make_request(random_tokens(rng, 20, 1000), 30);
  Request b = make_request(random_tokens(rng, 25, 1000), 30, 0.7f, 3);
  EngineOptions o = small_options();
  o.overlap_steps = EngineOptions::Overlap::on;
  EngineCore core(*m.model, o);
  ASSERT_TRUE(core.overlaps_steps());
  auto ha = std::make_shared<RequestStream>(2001), hb = std::make_shared<RequestStream>(2002);
  core.add(a, ha, Clock::now());
  core.add(b, hb, Clock::now());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(core.step());
  ASSERT_TRUE(core.has_work());
  core.cancel(2001);  // a step naming it is in flight
  core.check_invariants();
  while (core.step()) {
  }
  EXPECT_EQ(core.kv_cache().pool().num_used(), 0);
  EXPECT_EQ(core.num_live_requests(), 0);
  RequestResult ra = collect(*ha), rb = collect(*hb);
  EXPECT_EQ(ra.finish[0], FinishReason::cancelled);
  EXPECT_FALSE(ra.tokens.empty() || ra.tokens[0].empty());  // it had tokens before the cancel
  EXPECT_EQ(rb.tokens, run_alone(*m.model, {b})[0].tokens);
}

// Hybrid models (recurrent state slots, snapshots at block boundaries) overlap too: the state a
// step writes is queued before the next step reads it, and snapshots are taken after the step that
// reaches their boundary and before the next is launched.
TEST(EngineOverlap, HybridModelsSameEventsAsOneStepAtATime) {
  for (const char* name : {"qwen35-tiny", "qwen35-moe-tiny"}) {
    Loaded m = load_fixture(kFixtures + name);
    std::vector<Request> requests = overlap_requests(10, 41, true);
    EngineOptions o = small_options(size_t(4) << 20);
    o.max_num_batched_tokens = 64;
    o.snapshot_interval_blocks = 2;
    o.max_state_slots = 8;
    EngineStats on, off;
    const std::vector<RequestResult> want = run_with(*m.model, o, false, requests, &off);
    const std::vector<RequestResult> got = run_with(*m.model, o, true, requests, &on);
    expect_same_events(got, want, name);
    EXPECT_GT(on.steps_overlapped, on.num_steps / 3) << name;
    EXPECT_EQ(on.state_snapshots_saved, off.state_snapshots_saved) << name;
  }
}

}  // namespace
}  // namespace rill
