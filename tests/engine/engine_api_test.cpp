// The threaded Engine: requests submitted from several threads at once get exactly their solo
// tokens; a full queue is a typed refusal (queue_full), an impossible request too_long; cancel()
// ends a running request; stats() reports tokens, TTFT and KV blocks.
#include <thread>

#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

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
