// Sessions (Request::session_id, engine/session.h): a session's next turn finds its prefix in the
// cache after enough other traffic to evict every unpinned block (and the same traffic without a
// session evicts it), the pin moves to the latest turn, max_sessions is LRU over sessions, the
// pinned share of the pool is capped, pins are dropped under block pressure before anything is
// preempted, cancellation pins (and a cancelled waiting request keeps the old pin), and a hybrid
// model's session keeps its state snapshot against the snapshot LRU. KV, snapshot and session
// invariants are checked after every step.
#include "engine_test_util.h"

namespace rill {
namespace {

using namespace rill::test;

constexpr int32_t kVocab = 1000;

RequestResult run_one(EngineCore& core, const Request& r) { return run_core(core, {r})[0]; }

/// The next turn of a chat: the previous prompt, its reply, `n_new` new tokens.
Request next_turn(const Request& prev, const RequestResult& reply, std::mt19937& rng, int32_t n_new, int32_t max_tokens) {
  Request r = prev;
  r.prompt.insert(r.prompt.end(), reply.tokens[0].begin(), reply.tokens[0].end());
  const std::vector<int32_t> user = random_tokens(rng, n_new, kVocab);
  r.prompt.insert(r.prompt.end(), user.begin(), user.end());
  r.max_tokens = max_tokens;
  return r;
}

EngineOptions blocks_options(Model& model, int32_t blocks) {
  return small_options(size_t(blocks) * model.kv_spec().bytes_per_block(16));
}

TEST(EngineSession, SecondTurnSurvivesEvictingTraffic) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  for (bool session : {true, false}) {
    SCOPED_TRACE(session ? "with session" : "without session");
    std::mt19937 rng(3);
    EngineCore core(*m.model, blocks_options(*m.model, 16));
    ASSERT_EQ(core.kv_cache().num_blocks(), 16);
    Request t1 = make_request(random_tokens(rng, 60, kVocab), 8);
    if (session) t1.session_id = "chat-1";
    const RequestResult r1 = run_one(core, t1);
    // 67 computed tokens (60 prompt + 7 of the reply): 4 full blocks pinned.
    EXPECT_EQ(core.stats().sessions_pinned, session ? 1 : 0);
    EXPECT_EQ(core.stats().session_blocks_pinned, session ? 4 : 0);
    EXPECT_EQ(core.kv_cache().pool().num_used(), session ? 4 : 0);
    // Six requests of 7 blocks each through a pool of 16: every unpinned block is evicted.
    for (int i = 0; i < 6; ++i) run_one(core, make_request(random_tokens(rng, 90, kVocab), 10));
    EXPECT_EQ(core.stats().sessions_unpinned_for_space, 0);
    const Request t2 = next_turn(t1, r1, rng, 10, 6);  // 78 tokens
    const RequestResult r2 = run_one(core, t2);
    EXPECT_EQ(r2.cached_tokens, session ? 64 : 0);
    EXPECT_EQ(r2.tokens, run_alone(*m.model, {t2})[0].tokens);
    // The pin moved to turn 2: 78 + 5 computed tokens = 5 full blocks.
    EXPECT_EQ(core.stats().sessions_pinned, session ? 1 : 0);
    EXPECT_EQ(core.sessions().pinned_blocks("chat-1"), session ? 5 : 0);
    EXPECT_EQ(core.stats().session_blocks_pinned, session ? 5 : 0);
  }
}

TEST(EngineSession, MaxSessionsIsLruOverSessions) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::mt19937 rng(4);
  EngineOptions o = blocks_options(*m.model, 32);
  o.max_sessions = 2;
  EngineCore core(*m.model, o);
  auto turn = [&](const std::string& session) {
    Request r = make_request(random_tokens(rng, 40, kVocab), 4);
    r.session_id = session;
    run_one(core, r);
  };
  turn("a");
  turn("b");
  turn("c");  // a goes
  EXPECT_EQ(core.stats().sessions_pinned, 2);
  EXPECT_EQ(core.sessions().pinned_blocks("a"), 0);
  EXPECT_EQ(core.sessions().pinned_blocks("b"), 2);
  EXPECT_EQ(core.sessions().pinned_blocks("c"), 2);
  turn("b");  // b is now the most recent
  turn("d");  // c goes
  EXPECT_EQ(core.sessions().pinned_blocks("c"), 0);
  EXPECT_EQ(core.sessions().pinned_blocks("b"), 2);
  EXPECT_EQ(core.sessions().pinned_blocks("d"), 2);
  EXPECT_EQ(core.stats().sessions_unpinned_for_space, 2);
}

TEST(EngineSession, PinnedShareOfThePoolIsCapped) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::mt19937 rng(5);
  EngineOptions o = blocks_options(*m.model, 16);
  o.session_pinned_fraction = 0.25;  // 4 blocks
  EngineCore core(*m.model, o);
  EXPECT_EQ(core.sessions().max_pinned_blocks(), 4);
  auto turn = [&](const std::string& session, int32_t len) {
    Request r = make_request(random_tokens(rng, len, kVocab), 4);
    r.session_id = session;
    run_one(core, r);
  };
  turn("a", 70);  // 73 computed: 4 blocks, the whole cap
  EXPECT_EQ(core.sessions().pinned_blocks("a"), 4);
  turn("b", 40);  // 2 blocks: a has to go
  EXPECT_EQ(core.sessions().pinned_blocks("a"), 0);
  EXPECT_EQ(core.sessions().pinned_blocks("b"), 2);
  turn("c", 120);  // 7 full blocks, cut to the cap; b goes
  EXPECT_EQ(core.sessions().pinned_blocks("b"), 0);
  EXPECT_EQ(core.sessions().pinned_blocks("c"), 4);
  EXPECT_EQ(core.stats().session_blocks_pinned, 4);
  EXPECT_EQ(core.stats().sessions_pinned, 1);
  EXPECT_EQ(core.kv_cache().pool().num_used(), 4);  // idle: only the pin holds blocks
}

TEST(EngineSession, PressureUnpinsInsteadOfPreempting) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::mt19937 rng(6);
  EngineCore core(*m.model, blocks_options(*m.model, 16));  // pins may hold 8
  for (const char* session : {"a", "b"}) {
    Request r = make_request(random_tokens(rng, 60, kVocab), 8);
    r.session_id = session;
    run_one(core, r);
  }
  ASSERT_EQ(core.stats().session_blocks_pinned, 8);
  // Two rows of 60 + 40 tokens need 14 blocks together: more than the 8 the pins leave.
  const std::vector<Request> rows = {make_request(random_tokens(rng, 60, kVocab), 40),
                                     make_request(random_tokens(rng, 60, kVocab), 40, 0.8f, 12)};
  ASSERT_GT(2 * 7, core.kv_cache().num_available());
  const std::vector<RequestResult> got = run_core(core, rows);
  expect_same_tokens(got, run_alone(*m.model, rows), "under pin pressure");
  EXPECT_EQ(core.stats().num_preemptions, 0);
  EXPECT_EQ(core.stats().sessions_pinned, 0);
  EXPECT_EQ(core.stats().sessions_unpinned_for_space, 2);
  EXPECT_EQ(core.kv_cache().pool().num_used(), 0);
}

TEST(EngineSession, CancelPinsAndACancelledWaitingTurnKeepsTheOldPin) {
  Loaded m = load_fixture(kFixtures + "qwen3-tiny");
  std::mt19937 rng(7);
  EngineCore core(*m.model, blocks_options(*m.model, 32));
  Request t1 = make_request(random_tokens(rng, 60, kVocab), 8);
  t1.session_id = "s";
  const RequestResult r1 = run_one(core, t1);
  EXPECT_EQ(core.sessions().pinned_blocks("s"), 4);
  // Turn 2 (98 tokens) is cancelled mid-decode: its 6 computed full blocks become the pin.
  const Request t2 = next_turn(t1, r1, rng, 30, 20);
  auto h2 = std::make_shared<RequestStream>(5001);
  core.add(t2, h2, Clock::now());
  ASSERT_TRUE(core.step());  // prefill (64 tokens from the cache)
  ASSERT_TRUE(core.step());  // one decode
  EXPECT_EQ(core.stats().sessions_pinned, 0) << "the admitted turn took over the pin";
  core.cancel(5001);
  core.check_invariants();
  EXPECT_EQ(collect(*h2).cached_tokens, 64);
  EXPECT_EQ(core.sessions().pinned_blocks("s"), 6);
  // Turn 3 is cancelled before it ran: the pin stays.
  auto h3 = std::make_shared<RequestStream>(5002);
  RequestResult no_reply;
  no_reply.tokens.resize(1);
  core.add(next_turn(t2, no_reply, rng, 5, 4), h3, Clock::now());
  core.cancel(5002);
  core.check_invariants();
  EXPECT_EQ(core.sessions().pinned_blocks("s"), 6);
  EXPECT_EQ(core.kv_cache().pool().num_used(), 6);
  EXPECT_FALSE(core.has_work());
}

// A hybrid model resumes only where a state snapshot exists: the session keeps the snapshot of its
// boundary against the snapshot LRU (4 snapshots here, which other traffic overruns).
TEST(EngineHybridSession, SessionKeepsItsStateSnapshot) {
  Loaded m = load_fixture(kFixtures + "qwen35-tiny");
  for (bool session : {true, false}) {
    SCOPED_TRACE(session ? "with session" : "without session");
    std::mt19937 rng(9);
    EngineOptions o = small_options();
    o.max_num_batched_tokens = 64;
    o.snapshot_interval_blocks = 2;
    o.max_state_slots = 4;
    o.state_snapshot_bytes = 4 * m.model->state_bytes_per_sequence() + 100;
    o.kv_memory_bytes = 40 * m.model->kv_spec().bytes_per_block(16) + o.state_snapshot_bytes;
    EngineCore core(*m.model, o);
    ASSERT_EQ(core.snapshots().capacity(), 4);
    // Turn 1: 40 prompt tokens (snapshot at 32), 10 generated: 49 computed, 3 full blocks; the pin
    // is cut back to the 2 blocks that end at the snapshot.
    Request t1 = make_request(random_tokens(rng, 40, kVocab), 10);
    if (session) t1.session_id = "hybrid-chat";
    const RequestResult r1 = run_one(core, t1);
    if (session) {
      EXPECT_EQ(core.sessions().pinned_blocks("hybrid-chat"), 2);
      ASSERT_TRUE(core.sessions().pinned_snapshot("hybrid-chat").has_value());
      EXPECT_EQ(core.snapshots().num_pinned(), 1);
    }
    // Other traffic saves 12 snapshots (at 32 and 64 of 70-token prompts).
    for (int i = 0; i < 6; ++i) run_one(core, make_request(random_tokens(rng, 70, kVocab), 4));
    EXPECT_GE(core.stats().state_snapshots_evicted, 8);
    const Request t2 = next_turn(t1, r1, rng, 10, 6);  // 60 tokens
    const RequestResult r2 = run_one(core, t2);
    EXPECT_EQ(r2.cached_tokens, session ? 32 : 0);
    EXPECT_EQ(r2.tokens, run_alone(*m.model, {t2})[0].tokens);
    EXPECT_EQ(core.state_pool().num_free(), core.state_pool().num_slots());
  }
}

}  // namespace
}  // namespace rill
