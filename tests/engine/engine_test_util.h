// Shared helpers of the engine tests: fixture models, requests, and driving an EngineCore step by
// step with the KV invariants checked after every step.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "engine/spec/draft_source.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/random_model.h"

namespace rill::test {

inline const std::string kFixtures = std::string(RILL_SOURCE_DIR) + "/tests/fixtures/models/";

struct Loaded {
  std::unique_ptr<Kernels> kernels;
  std::unique_ptr<Model> model;
};

inline Loaded load_fixture(const std::filesystem::path& dir) {
  Loaded l;
  l.kernels = make_cpu_kernels();
  l.model = load_model(dir, *l.kernels, LoadOptions{std::nullopt, false});
  return l;
}

/// A tiny random Qwen3 (hidden 64, 2 layers, vocab 151936, context 40960), made once per process.
inline std::filesystem::path long_context_model() {
  struct Dir {
    std::filesystem::path path;
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir{[] {
    auto d = std::filesystem::temp_directory_path() / ("rill_engine_test_qwen3_tiny_" + std::to_string(::getpid()));
    RandomModelOptions o;
    o.shape = "qwen3-tiny";
    o.out_dir = d;
    o.seed = 7;
    make_random_model(o);
    return d;
  }()};
  return dir.path;
}

struct Reference {
  std::vector<std::vector<int32_t>> prompts, greedy;
};
inline Reference load_reference(const std::string& name) {
  std::ifstream in(kFixtures + name + "/reference.json");
  auto j = nlohmann::json::parse(in);
  return {j["prompts"].get<std::vector<std::vector<int32_t>>>(), j["greedy"].get<std::vector<std::vector<int32_t>>>()};
}

inline EngineOptions small_options(size_t kv_bytes = size_t(8) << 20) {
  EngineOptions o;
  o.kv_memory_bytes = kv_bytes;
  o.check_invariants = true;
  // The path CUDA takes by default (automatic leaves it off on the CPU): every engine test runs it.
  o.overlap_steps = EngineOptions::Overlap::on;
  return o;
}

/// Adds every request to `core`, steps until idle (invariants checked each step), collects.
inline std::vector<RequestResult> run_core(EngineCore& core, const std::vector<Request>& requests) {
  static uint64_t next_id = 1;
  std::vector<RequestHandle> handles;
  for (const Request& r : requests) {
    core.validate(r);
    std::string why;
    EXPECT_EQ(core.admissible(r, why), RejectReason::none) << why;
    handles.push_back(std::make_shared<RequestStream>(next_id++));
    core.add(r, handles.back(), Clock::now());
  }
  int steps = 0;
  while (core.step()) ++steps;
  std::vector<RequestResult> out;
  for (auto& h : handles) {
    EXPECT_FALSE(h->done());
    out.push_back(collect(*h));
  }
  core.check_invariants();
  // Idle: only session pins hold blocks.
  EXPECT_EQ(core.kv_cache().pool().num_used(), core.sessions().num_pinned_blocks()) << "blocks leaked";
  EXPECT_EQ(core.num_live_requests(), 0);
  return out;
}

/// Each request alone, one after the other, in a core without prefix caching.
inline std::vector<RequestResult> run_alone(Model& model, const std::vector<Request>& requests,
                                            size_t kv_bytes = size_t(8) << 20) {
  EngineOptions o = small_options(kv_bytes);
  o.prefix_caching = false;
  EngineCore core(model, o);
  std::vector<RequestResult> out;
  for (const Request& r : requests) out.push_back(run_core(core, {r})[0]);
  return out;
}

inline Request make_request(std::vector<int32_t> prompt, int32_t max_tokens, float temperature = 0.f,
                            std::optional<uint64_t> seed = std::nullopt) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

/// log_softmax(x)[t] of a row of V logits, in double (the reference for logprobs).
inline double log_softmax_at(const float* x, int64_t V, int32_t t) {
  double mx = -INFINITY, z = 0;
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(x[i]));
  for (int64_t i = 0; i < V; ++i) z += std::exp(double(x[i]) - mx);
  return double(x[t]) - mx - std::log(z);
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> d(3, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = d(rng);
  return t;
}

/// The sampling controls a test's request i gets: greedy when i is even; odd ones sample with
/// seed seed_base + i, and every fourth (i % 4 == 3) adds penalties and a logit bias.
struct SamplingMix {
  float temperature, top_p;
  int32_t top_k;
  uint64_t seed_base;
  float repetition_penalty, frequency_penalty;
  int32_t bias_token;
  float bias;
};
inline void mix_sampling(Request& r, int i, const SamplingMix& m) {
  if (i % 2 == 0) return;
  r.sampling.temperature = m.temperature;
  r.sampling.top_p = m.top_p;
  r.sampling.top_k = m.top_k;
  r.sampling.seed = m.seed_base + uint64_t(i);
  if (i % 4 == 3) {
    r.sampling.repetition_penalty = m.repetition_penalty;
    r.sampling.frequency_penalty = m.frequency_penalty;
    r.sampling.logit_bias = {{m.bias_token, m.bias}};
  }
}

/// 32 requests of lengths 1..~120 and 4..40 new tokens; odd ones sample with a seed.
inline std::vector<Request> mixed_requests(int count, int32_t vocab, uint32_t seed, int32_t max_prompt = 120) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    const int32_t len = 1 + int32_t(rng() % uint32_t(max_prompt));
    const int32_t max_tokens = 4 + int32_t(rng() % 37u);
    Request r = make_request(random_tokens(rng, len, vocab), max_tokens);
    mix_sampling(r, i, {0.8f, 0.95f, 40, 1000, 1.2f, 0.5f, 5, 2.f});
    out.push_back(std::move(r));
  }
  return out;
}

inline void expect_same_tokens(const std::vector<RequestResult>& got, const std::vector<RequestResult>& want,
                               const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ": request " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << what << ": request " << i;
  }
}

/// Drafts from the known continuations of known prompts: right (bad < 0), or wrong from the draft
/// at index `bad` of every proposal on, or always wrong (garbage).
/// `random_seed` set: each proposal is cut to a random length (possibly none) and wrong from a random
/// position on (possibly none), instead of `bad` / `garbage`.
class OracleDrafts final : public DraftSource {
 public:
  OracleDrafts(std::vector<std::vector<int32_t>> full, int32_t vocab, int32_t bad = -1, bool garbage = false,
               std::optional<uint32_t> random_seed = std::nullopt)
      : full_(std::move(full)), vocab_(vocab), bad_(bad), garbage_(garbage), random_(random_seed.has_value()),
        rng_(random_seed.value_or(0)) {}
  void propose(std::span<const int32_t> context, int32_t max_drafts, std::vector<int32_t>& out) override {
    ++calls;
    int32_t bad = bad_;
    if (random_) {
      max_drafts = int32_t(rng_() % uint32_t(max_drafts + 1));
      bad = int32_t(rng_() % uint32_t(max_drafts + 2)) - 1;  // -1: all right
    }
    for (const auto& f : full_) {
      if (f.size() <= context.size() || !std::equal(context.begin(), context.end(), f.begin())) continue;
      for (int32_t j = 0; j < max_drafts && context.size() + size_t(j) < f.size(); ++j) {
        int32_t t = f[context.size() + size_t(j)];
        if (garbage_ || (bad >= 0 && j >= bad)) t = (t + 1 + int32_t(rng_() % 7u)) % vocab_;
        out.push_back(t);
      }
      return;
    }
  }
  int64_t calls = 0;

 private:
  std::vector<std::vector<int32_t>> full_;
  int32_t vocab_, bad_;
  bool garbage_, random_;
  std::mt19937 rng_;
};

/// Prompts that repeat a random segment (so that an n-gram lookup finds matches), half greedy, half
/// sampled with a seed, a quarter with penalties and a logit bias.
inline std::vector<Request> repetitive_requests(int count, int32_t vocab, uint32_t seed, int32_t max_tokens) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    const std::vector<int32_t> segment = random_tokens(rng, 3 + int32_t(rng() % 6u), vocab);
    std::vector<int32_t> prompt;
    for (int k = 0; k < 4; ++k) prompt.insert(prompt.end(), segment.begin(), segment.end());
    Request r = make_request(prompt, max_tokens);
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = 2;
    mix_sampling(r, i, {0.7f, 1.f, 20, 500, 1.1f, 0.3f, 7, 1.5f});
    out.push_back(std::move(r));
  }
  return out;
}

/// Same tokens, finish reasons and logprobs: bit for bit, or within `tolerance` where it is > 0.
inline void expect_identical(const std::vector<RequestResult>& got, const std::vector<RequestResult>& want,
                             const std::string& what, double tolerance = 0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ": request " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << what << ": request " << i;
    if (tolerance == 0) {
      EXPECT_EQ(got[i].logprobs, want[i].logprobs) << what << ": request " << i;
      EXPECT_EQ(got[i].top_logprobs, want[i].top_logprobs) << what << ": request " << i;
      continue;
    }
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << what << ": request " << i;
    for (size_t q = 0; q < got[i].logprobs.size(); ++q) {
      ASSERT_EQ(got[i].logprobs[q].size(), want[i].logprobs[q].size()) << what << ": request " << i;
      for (size_t t = 0; t < got[i].logprobs[q].size(); ++t)
        EXPECT_NEAR(got[i].logprobs[q][t], want[i].logprobs[q][t], tolerance) << what << ": request " << i;
    }
  }
}

inline std::vector<std::vector<int32_t>> full_sequences(const std::vector<Request>& requests,
                                                 const std::vector<RequestResult>& results) {
  std::vector<std::vector<int32_t>> full;
  for (size_t i = 0; i < requests.size(); ++i) {
    full.push_back(requests[i].prompt);
    full.back().insert(full.back().end(), results[i].tokens[0].begin(), results[i].tokens[0].end());
  }
  return full;
}

}  // namespace rill::test
