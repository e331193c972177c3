// The threaded Engine: requests submitted from several threads at once get exactly their solo
// tokens; a full queue is a typed refusal (queue_full), an impossible request too_long; cancel()
// ends a running request; stats() reports tokens, TTFT and KV blocks; the activity log line says what
// a window of work did.
#include <thread>

#include "common/log_capture.h"
#include "engine/metrics.h"
#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

TEST(EngineApi, ActivityLineReportsTheWindowsRatesAndShares) {
  EngineStats before, now;
  before.prompt_tokens = 100, before.prefix_hit_tokens = 10, before.generated_tokens = 50, before.num_preemptions = 1;
  now = before;
  now.num_running = 3, now.num_waiting = 2;
  now.prompt_tokens = 300, now.prefix_hit_tokens = 60, now.generated_tokens = 250, now.num_preemptions = 3;
  now.kv_blocks_total = 200, now.kv_blocks_used = 50, now.kv_blocks_cached = 20;
  const std::string line = activity_line(before, now, 2.0);
  for (const char* part : {"3 running, 2 waiting", "prompt 100.0 tok/s", "generation 100.0 tok/s",
                           "KV cache 25.0% used, 10.0% kept for prefixes", "prefix cache hits 25.0% of prompt tokens",
                           "2 preempted"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " not in: " << line;
  // No prompt tokens in the window: no hit share; no preemptions: not mentioned.
  const std::string quiet = activity_line(now, now, 1.0);
  EXPECT_EQ(quiet.find("prefix cache hits"), std::string::npos) << quiet;
  EXPECT_EQ(quiet.find("preempted"), std::string::npos) << quiet;
}

TEST(EngineApi, ActivityLogWhileThereIsWorkAndABadIntervalRefused) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::string out;
  {
    LogCapture log(spdlog::level::info);
    EngineOptions o = small_options();
    o.log_stats_interval_s = 1e-6;  // a line after every step, and when the work runs out
    Engine engine(*m.model, o);
    for (const Request& r : mixed_requests(4, 1000, 77)) ASSERT_TRUE(engine.submit(r).ok());
    engine.wait_idle();
    out = log.text();
  }
  EXPECT_NE(out.find("engine: "), std::string::npos) << out;
  EXPECT_NE(out.find("generation "), std::string::npos) << out;
  EXPECT_NE(out.find("0 running, 0 waiting"), std::string::npos) << "no line when the work ran out:\n" << out;

  EngineOptions bad = small_options();
  bad.log_stats_interval_s = -1;
  try {
    Engine engine(*m.model, bad);
    FAIL() << "a negative activity-log interval was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("log_stats_interval_s"), std::string::npos) << e.what();
  }
}

TEST(EngineApi, ConcurrentSubmittersGetSoloTokens) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  const std::vector<Request> requests = mixed_requests(32, 1000, 1234);
  const std::vector<RequestResult> alone = run_alone(*m.model, requests);
  std::vector<RequestResult> got(requests.size());
  {
    EngineOptions o = small_options();
    o.max_num_batched_tokens = 96;
    Engine engine(*m.model, o);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        std::vector<std::pair<size_t, RequestHandle>> mine;
        for (size_t i = size_t(t); i < requests.size(); i += 4) {
          Submission s = engine.submit(requests[i]);
          ASSERT_TRUE(s.ok()) << s.message;
          mine.emplace_back(i, s.handle);
        }
        for (auto& [i, h] : mine) got[i] = collect(*h);
      });
    for (auto& t : threads) t.join();
    engine.wait_idle();
    EngineStats s = engine.stats();
    int64_t tokens = 0;
    for (auto& r : alone) tokens += int64_t(r.tokens[0].size());
    EXPECT_EQ(s.generated_tokens, tokens);
    EXPECT_EQ(s.requests_finished, 32);
    EXPECT_EQ(s.ttft.count, 32);
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.num_running, 0);
    EXPECT_GT(s.kv_blocks_total, 0);
    EXPECT_LT(s.num_steps, tokens) << "requests were not batched";
  }
  expect_same_tokens(got, alone, "threaded engine");
}

TEST(EngineApi, QueueFullAndTooLongAreTypedRefusals) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  EngineOptions o = small_options();
  o.max_waiting = 2;
  o.max_num_seqs = 1;  // one running request at a time: the rest wait
  Engine engine(*m.model, o);
  Submission too_long = engine.submit(make_request(std::vector<int32_t>(250, 3), 10));
  EXPECT_EQ(too_long.reject, RejectReason::too_long);
  EXPECT_FALSE(too_long.handle);
  std::vector<RequestHandle> accepted;
  int full = 0;
  for (int i = 0; i < 40; ++i) {
    Submission s = engine.submit(make_request(std::vector<int32_t>(40, 3 + i), 30));
    if (s.ok())
      accepted.push_back(s.handle);
    else {
      EXPECT_EQ(s.reject, RejectReason::queue_full);
      EXPECT_NE(s.message.find("queue is full"), std::string::npos);
      ++full;
    }
  }
  EXPECT_GT(full, 0);
  for (auto& h : accepted) {
    RequestResult r = collect(*h);
    EXPECT_EQ(r.tokens[0].size(), 30u);
  }
  engine.wait_idle();
  EXPECT_EQ(engine.stats().requests_rejected, full + 1);
  EXPECT_THROW(engine.submit(make_request({1, 2, 5000}, 3)), Error);
}

TEST(EngineApi, CancelEndsARunningRequest) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  Engine engine(*m.model, small_options());
  Submission s = engine.submit(make_request(std::vector<int32_t>(20, 7), 200));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.handle->next().has_value());  // the first token arrived
  engine.cancel(s.handle);
  RequestResult r = collect(*s.handle);
  EXPECT_EQ(r.finish[0], FinishReason::cancelled);
  EXPECT_LT(r.tokens[0].size(), 199u);
  engine.wait_idle();
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace rill
