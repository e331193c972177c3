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

/// 32 requests of lengths 1..~120 and 4..40 new tokens; odd ones sample with a seed.
inline std::vector<Request> mixed_requests(int count, int32_t vocab, uint32_t seed, int32_t max_prompt = 120) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    const int32_t len = 1 + int32_t(rng() % uint32_t(max_prompt));
    const int32_t max_tokens = 4 + int32_t(rng() % 37u);
    Request r = make_request(random_tokens(rng, len, vocab), max_tokens);
    if (i % 2) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.95f;
      r.sampling.top_k = 40;
      r.sampling.seed = 1000 + uint64_t(i);
      if (i % 4 == 3) {
        r.sampling.repetition_penalty = 1.2f;
        r.sampling.frequency_penalty = 0.5f;
        r.sampling.logit_bias = {{5, 2.f}};
      }
    }
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

}  // namespace rill::test
