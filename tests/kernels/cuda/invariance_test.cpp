// Batch invariance of the CUDA GEMMs (the backend default): a row's matmul output is bitwise the
// same computed alone (M = 1) or at other positions of batches of 7, 64 and 300 rows (every tile
// configuration and both split-K schedules, the split partials folded by a second kernel or by
// the tile's last CTA; fused outputs are the one GEMM's columns), and every configuration, the
// decode kernels and the fused SwiGLU epilogues give the bits of the mma.sync kernel's fold
// schedule. Inputs are fresh random values (label cuda). Also printed GEMM timings next to
// cuBLASLt and the matvec (DISABLED_: run with --gtest_also_run_disabled_tests; benchmarks, not
// assertions). The attention's invariance is in invariance_attention_test.cpp, the decode step's
// fused and deferred ops in invariance_decode_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/invariance_util.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

namespace rill {
namespace {

using namespace cuda_test;



std::vector<float> run_matmul(const std::vector<float>& x, int64_t m, const DevTensor& dw, const DevTensor* db) {
  const int64_t n = dw.t.size(0), k = dw.t.size(1);
  DevTensor dx = upload_bf16(x, {m, k}), dy(DType::bf16, {m, n});
  dy.poison();
  backend().matmul(dx.t, dw.t, db ? &db->t : nullptr, dy.t);
  return download_bf16(dy);
}

TEST(CudaInvariance, MatmulRowAloneEqualsRowInBatches) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct S {
    int64_t n, k;
    bool bias;
  };
  // Decode-like (many splits), a K tail of 8, odd N, a wide N with one split.
  const S shapes[] = {{1024, 4096, false}, {4097, 1032, true}, {333, 12296, true}, {30001, 520, false},
                      {4096, 4096, false}};
  for (const S& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "N=" << s.n << " K=" << s.k);
    auto w = random_bf16_values(rng, size_t(s.n * s.k));
    auto b = random_bf16_values(rng, size_t(s.n));
    DevTensor dw = upload_bf16(w, {s.n, s.k}), db = upload_bf16(b, {s.n});
    const DevTensor* bias = s.bias ? &db : nullptr;
    for (int trial = 0; trial < 2; ++trial) {
      auto row = random_bf16_values(rng, size_t(s.k), -2.f, 2.f);
      auto alone = run_matmul(row, 1, dw, bias);
      const std::pair<int64_t, int64_t> batches[] = {{7, 3}, {64, 40}, {300, 123 + trial}, {300, 299}, {2048, 1777}};
      for (auto [m, at] : batches) {
        auto x = random_bf16_values(rng, size_t(m * s.k), -2.f, 2.f);
        std::copy(row.begin(), row.end(), x.begin() + at * s.k);
        auto y = run_matmul(x, m, dw, bias);
        EXPECT_TRUE(same_bits(alone.data(), y.data() + at * s.n, size_t(s.n)))
            << "row at " << at << " of M=" << m << " differs from M=1";
      }
    }
  }
}

// Every tile configuration gives the same bits (the automatic choice depends on M only).
TEST(CudaInvariance, GemmConfigurationsAgree) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t m = 37, n = 1001, k = 2056;
  DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k)), {m, k});
  DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
  DevTensor db = upload_bf16(random_bf16_values(rng, size_t(n)), {n});
  std::vector<float> first;
  for (int config : {1, 2, 3, 4, 5, 6, 9, 10, 11}) {
    if (config >= 9 && backend().info().cc_major < 9) continue;  // the bulk copy engine is sm_90+
    if (config == 11 && !cuda::gemm_wgmma_supported()) continue;  // sm_90a build on an sm_90 GPU
    DevTensor dy(DType::bf16, {m, n});
    dy.poison();
    // No workspace: the fold schedule.
    cuda::launch_gemm(plain_gemm(dx.t.data(), dw.t.data(), db.t.data(), dy.t.data(), m, n, k, config),
                      backend().stream());
    auto y = download_bf16(dy);
    if (first.empty()) first = y;
    else EXPECT_TRUE(same_bits(first.data(), y.data(), y.size())) << "configuration " << config;
  }
}

// The streaming decode kernel (configurations 7, 8: weights straight into mma fragments, a quad
// transpose, the ranges folded in shared memory), the warpgroup decode kernel (18, 19: wgmma with
// x as a 64-row A whose rows 8-63 are stale shared memory; its fold and split schedules) and the
// tiled kernel with bulk copies (9, 10:
// stale rows past M/N, a zeroed half step at K's end) give the bits of the tiled kernel's fold
// schedule, for every M it takes (rows g + 8 of the mma in use or not), a K tail of 8 (a half
// 16-wide step), N not a multiple of 8, 1 to 8 split ranges, with and without bias.
TEST(CudaInvariance, StreamingDecodeGemmEqualsTiled) {
  RILL_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // {6144, 4096}: 768 work items of configuration 18's split schedule, {32008, 256}: 501 of its
  // fold schedule — more than a wave, so persistent CTAs take several each.
  const std::pair<int64_t, int64_t> shapes[] = {{1001, 2056}, {4096, 4096}, {6144, 4096},
                                                {333, 12296}, {24, 520},   {32008, 256}};
  for (auto [n, k] : shapes) {
    const auto split = cuda::gemm_split(n, k, backend().info().num_sms);
    SCOPED_TRACE(::testing::Message() << "N=" << n << " K=" << k << " S=" << split.splits);
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
    DevTensor db = upload_bf16(random_bf16_values(rng, size_t(n)), {n});
    for (int64_t m : {1, 2, 5, 8, 9, 16}) {
      DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
      for (bool bias : {false, true}) {
        // 18, 19 twice: without a workspace (one CTA walks every range) and with the engine's
        // workspace and counters (one range a CTA, folded by each tile's last CTA).
        const int configs[] = {1, 7, 8, 9, 10, 18, 19, 18, 19};
        constexpr int kConfigs = int(std::size(configs));
        std::vector<float> got[kConfigs];
        const bool wgmma = cuda::gemm_wgmma_supported();
        for (int ci = 0; ci < kConfigs; ++ci) {
          int config = configs[ci];
          if (config >= 9 && config <= 10 && backend().info().cc_major < 9) config = 1;
          if ((config >= 18 && !wgmma) || (config == 18 && m > 8)) config = 1;
          DevTensor dy(DType::bf16, {m, n});
          dy.poison();
          // Configuration 1 without a workspace: the tiled kernel's fold schedule.
          cuda::GemmArgs ga = plain_gemm(dx.t.data(), dw.t.data(), bias ? db.t.data() : nullptr, dy.t.data(), m, n, k,
                                         config);
          if (ci >= 7) {
            ga = backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), bias ? db.t.data() : nullptr, m, n, k);
            ga.y = dy.t.data();
            ga.config = config;
          }
          cuda::launch_gemm(ga, backend().stream());
          got[ci] = download_bf16(dy);
        }
        for (int c = 1; c < kConfigs; ++c) {
          for (float v : got[c])
            ASSERT_FALSE(std::isnan(v)) << "unwritten output, M=" << m << " configuration " << configs[c];
          EXPECT_TRUE(same_bits(got[0].data(), got[c].data(), got[0].size()))
              << "M=" << m << " bias " << bias << " configuration " << configs[c];
        }
      }
    }
  }
}

// The warpgroup decode kernel for M 9..64 (configuration 19: x stages of 16, 32 or 64 rows, the
// smallest holding M, or the 64-row stage at every M as RILL_DECODE_X_ROWS=64 runs it), in its fold
// and split schedules, gives the bits of the mma.sync kernel's fold schedule (configuration 2).
TEST(CudaInvariance, WgmmaDecodeGemmEqualsTiled) {
  RILL_REQUIRE_GPU();
  if (!cuda::gemm_wgmma_supported()) GTEST_SKIP() << "no sm_90a warpgroup GEMM on this GPU / build";
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::pair<int64_t, int64_t> shapes[] = {{1001, 2056}, {6144, 4096}, {333, 12296}};
  for (auto [n, k] : shapes) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " K=" << k);
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
    DevTensor db = upload_bf16(random_bf16_values(rng, size_t(n)), {n});
    for (int64_t m : {9, 16, 17, 32, 33, 64}) {
      DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
      std::vector<float> got[4];
      for (int v = 0; v < 4; ++v) {
        cuda::set_decode_min_x_rows(v == 3 ? 64 : 16);
        DevTensor dy(DType::bf16, {m, n});
        dy.poison();
        cuda::GemmArgs ga = plain_gemm(dx.t.data(), dw.t.data(), db.t.data(), dy.t.data(), m, n, k, v == 0 ? 2 : 19);
        if (v >= 2) {  // with the workspace and counters: one range a CTA
          ga = backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), db.t.data(), m, n, k);
          ga.y = dy.t.data();
          ga.config = 19;
        }
        cuda::launch_gemm(ga, backend().stream());
        got[v] = download_bf16(dy);
      }
      cuda::set_decode_min_x_rows(cuda::parse_decode_x_rows(std::getenv("RILL_DECODE_X_ROWS")));
      for (int v = 1; v < 4; ++v) {
        for (float x : got[v]) ASSERT_FALSE(std::isnan(x)) << "unwritten output, M=" << m << " variant " << v;
        EXPECT_TRUE(same_bits(got[0].data(), got[v].data(), got[0].size())) << "M=" << m << " variant " << v;
      }
    }
  }
}

// The warpgroup decode GEMM (configuration 18 to M = 8, then 19 at 16 and 32 rows) under each of
// `settings` (applied before its launch; `restore` after every setting ran): the bits of the first
// setting, split schedule (the engine's workspace) and fold schedule (none).
void expect_decode_settings_keep_bits(const std::vector<std::pair<std::string, std::function<void()>>>& settings,
                                      const std::function<void()>& restore) {
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {4096, 12288}, {1000, 2056}};
  for (auto [n, k] : shapes) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " K=" << k);
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
    DevTensor db = upload_bf16(random_bf16_values(rng, size_t(n)), {n});
    for (int64_t m : {1, 3, 8, 12, 16, 29, 32}) {
      DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
      for (bool workspace : {true, false}) {
        std::vector<std::vector<float>> got;
        for (const auto& setting : settings) {
          setting.second();
          DevTensor dy(DType::bf16, {m, n});
          dy.poison();
          const void* x = dx.t.data();
          cuda::GemmArgs ga = workspace ? backend().matmul_engine().gemm_args(x, dw.t.data(), db.t.data(), m, n, k)
                                        : plain_gemm(x, dw.t.data(), db.t.data(), nullptr, m, n, k);
          ga.y = dy.t.data();
          ga.config = m <= 8 ? 18 : 19;
          cuda::launch_gemm(ga, backend().stream());
          got.push_back(download_bf16(dy));
        }
        restore();
        for (size_t v = 1; v < settings.size(); ++v) {
          for (float x : got[v])
            ASSERT_FALSE(std::isnan(x)) << "unwritten output, M=" << m << " " << settings[v].first;
          EXPECT_EQ(differing_bits(got[0], got[v]), 0u)
              << "M=" << m << " " << settings[v].first << " workspace " << workspace;
        }
      }
    }
  }
}

// The decode GEMM's launches with at most two work items an SM (the 8B shape's o and down at 1-32
// rows) run on CTAs sized so that two fit an SM — configuration 18 (M <= 8) on 9 or 12 stages, by
// default 9, configuration 19 (16 or 32 rows) on 9 (set_decode_few_item_stages): the bits of the
// three-an-SM CTAs.
TEST(CudaInvariance, FewItemStagesKeepBits) {
  RILL_REQUIRE_GPU();
  if (!cuda::gemm_wgmma_supported()) GTEST_SKIP() << "no sm_90a warpgroup GEMM on this GPU / build";
  std::vector<std::pair<std::string, std::function<void()>>> settings;
  for (int stages : {0, 9, 12})
    settings.push_back({"stages " + std::to_string(stages), [stages] { cuda::set_decode_few_item_stages(stages); }});
  expect_decode_settings_keep_bits(settings, [] {
    cuda::set_decode_few_item_stages(cuda::parse_decode_few_item_stages(std::getenv("RILL_DECODE_FEW_ITEM_STAGES")));
  });
}

// The decode GEMM's throttled pre-wait fill (set_decode_prewait_fill: up to that many stages before
// the wait, at most the pre-wait stages' weight tiles in flight; the x copies and each stage's
// arrival after the wait): only when the bytes arrive changes, so the bits of no fill. Pre-wait
// stages 1 (every tile after the first waits for one to land), 3 and 5; fills of some and of all
// stages (12: every CTA's all); the few-item CTAs (9 stages) and the others (6-8). And a deeper
// burst without a fill (9: every stage of the few-item CTAs before the wait, as the o projection
// takes with RILL_DECODE_PREWAIT_AFTER_ATTENTION=9).
TEST(CudaInvariance, PrewaitFillKeepsBits) {
  RILL_REQUIRE_GPU();
  if (!cuda::gemm_wgmma_supported()) GTEST_SKIP() << "no sm_90a warpgroup GEMM on this GPU / build";
  std::vector<std::pair<std::string, std::function<void()>>> settings;
  settings.push_back({"no fill", [] {
                        cuda::set_decode_prewait_stages(5);
                        cuda::set_decode_prewait_fill(0);
                      }});
  for (auto [pre, fill] : {std::pair{1, 12}, {3, 7}, {3, 12}, {5, 12}, {9, 0}})
    settings.push_back({"prewait " + std::to_string(pre) + " fill " + std::to_string(fill), [pre, fill] {
                          cuda::set_decode_prewait_stages(pre);
                          cuda::set_decode_prewait_fill(fill);
                        }});
  expect_decode_settings_keep_bits(settings, [] {
    cuda::set_decode_prewait_stages(cuda::parse_decode_prewait(std::getenv("RILL_DECODE_PREWAIT")));
    cuda::set_decode_prewait_fill(cuda::parse_decode_prewait_fill(std::getenv("RILL_DECODE_PREWAIT_FILL")));
  });
}

// Weights stored as k-panels (GemmArgs::w_panels: 64-column panels, each [n, 64] contiguous and
// already in the swizzled image a tensor copy leaves in shared memory) give every warpgroup GEMM the
// bits of the row-major weight: the decode configurations 18 and 19 (fold and split schedules, the
// SwiGLU variant's 32-row halves), the prefill configurations the launch picks (persistent 128- or
// 192-column tiles, split ranges, one CTA a tile) and the prefill SwiGLU epilogue, with bias, with N
// not a multiple of the 128-column tile (the last tile's rows past N read the next panel). Then
// through the engine: store_as_panels converts a weight in place, run and run_outputs read it, a
// pointer inside it is refused, and an upload or a free forgets it.
TEST(CudaInvariance, PanelWeightsEqualRowMajor) {
  RILL_REQUIRE_GPU();
  if (!cuda::gemm_wgmma_supported()) GTEST_SKIP() << "no sm_90a warpgroup GEMM on this GPU / build";
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int sms = backend().info().num_sms;
  const std::pair<int64_t, int64_t> shapes[] = {{6144, 4096}, {4096, 12288}, {192, 256}, {640, 1088}, {1344, 576}};
  for (auto [n, k] : shapes) {
    SCOPED_TRACE(::testing::Message() << "N=" << n << " K=" << k);
    ASSERT_TRUE(cuda::panels_fit(n, k));
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
    DevTensor db = upload_bf16(random_bf16_values(rng, size_t(n)), {n});
    DevTensor panels(DType::bf16, {n, k});
    cuda::launch_to_panels(dw.t.data(), panels.t.data(), n, k, backend().stream());
    for (int64_t m : {1, 5, 8, 16, 40, 64, 100, 300, 1000}) {
      DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
      // Decode rows — 0: fold schedule; 1: split ranges; 2: SwiGLU. Prefill rows — 0: the
      // launch's own choice with bias; 1: the split-range configuration; 2: SwiGLU where it fits.
      for (int run = 0; run < 3; ++run) {
        const bool decode = m <= 64;
        if (run == 2 && !decode && !cuda::gemm_swiglu_fits(m, n / 2, k, sms)) continue;
        const int64_t ny = run == 2 ? n / 2 : n;
        std::vector<float> got[2];
        for (int t = 0; t < 2; ++t) {  // row-major, k-panels
          DevTensor dy(DType::bf16, {m, ny});
          dy.poison();
          const void* x = dx.t.data();
          const void* w = t == 0 ? dw.t.data() : panels.t.data();
          const void* b = !decode && run == 0 ? db.t.data() : nullptr;
          cuda::GemmArgs ga = run == 0 && decode ? plain_gemm(x, w, nullptr, nullptr, m, n, k)
                                                 : backend().matmul_engine().gemm_args(x, w, b, m, n, k);
          ga.bias = b;
          ga.y = dy.t.data();
          if (decode) ga.config = m <= 8 ? 18 : 19;
          if (!decode && run == 1) ga.config = 15;
          if (run == 2) ga.glu_inter = n / 2, ga.glu_schedule = decode ? 2 : 0;
          ga.w_panels = t == 1;
          cuda::launch_gemm(ga, backend().stream());
          got[t] = download_bf16(dy);
        }
        for (float x : got[1]) ASSERT_FALSE(std::isnan(x)) << "unwritten output, M=" << m << " run " << run;
        EXPECT_EQ(differing_bits(got[0], got[1]), 0u) << "M=" << m << " run " << run;
      }
    }
  }
  // A path that cannot read panels is refused, not run.
  {
    const int64_t n = 192, k = 256;
    DevTensor dw(DType::bf16, {n, k}), dx(DType::bf16, {1, k}), dy(DType::bf16, {1, n});
    cuda::GemmArgs ga = plain_gemm(dx.t.data(), dw.t.data(), nullptr, dy.t.data(), 1, n, k, 7);
    ga.w_panels = true;
    EXPECT_THROW(cuda::launch_gemm(ga, backend().stream()), Error);
  }
  // Through the engine.
  cuda::MatmulEngine& engine = backend().matmul_engine();
  const int64_t n = 1024, k = 2048;
  const auto values = random_bf16_values(rng, size_t(n * k));
  DevTensor dw = upload_bf16(values, {n, k}), reference = upload_bf16(values, {n, k});
  const size_t before = engine.panel_bytes();
  ASSERT_TRUE(engine.store_as_panels(dw.t.data(), n, k));
  EXPECT_TRUE(engine.is_panels(dw.t.data(), n, k));
  EXPECT_EQ(engine.panel_bytes(), before + size_t(n * k) * 2);
  {
    DevTensor misfit(DType::bf16, {100, 256});  // N not a multiple of 64: stays row-major
    EXPECT_FALSE(engine.store_as_panels(misfit.t.data(), 100, 256));
    EXPECT_FALSE(engine.is_panels(misfit.t.data(), 100, 256));
  }
  for (int64_t m : {1, 12, 300}) {
    SCOPED_TRACE(::testing::Message() << "engine M=" << m);
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
    auto product = [&](const DevTensor& w) {
      DevTensor dy(DType::bf16, {m, n});
      dy.poison();
      engine.run(dx.t.data(), w.t.data(), nullptr, dy.t.data(), m, n, k);
      return download_bf16(dy);
    };
    EXPECT_EQ(differing_bits(product(reference), product(dw)), 0u);
    // Three outputs in one launch (as q, k, v).
    DevTensor o0(DType::bf16, {m, 512}), o1(DType::bf16, {m, 256}), o2(DType::bf16, {m, 256});
    void* outs[3] = {o0.t.data(), o1.t.data(), o2.t.data()};
    const int64_t ends[3] = {512, 768, 1024};
    ASSERT_TRUE(engine.run_outputs(dx.t.data(), dw.t.data(), nullptr, outs, ends, 3, m, n, k));
    std::vector<float> joined;
    const auto whole = product(reference);
    const std::vector<float> parts[3] = {download_bf16(o0), download_bf16(o1), download_bf16(o2)};
    for (int64_t r = 0; r < m; ++r)
      for (int s = 0; s < 3; ++s) {
        const int64_t w = s == 0 ? 512 : 256;
        joined.insert(joined.end(), parts[s].begin() + r * w, parts[s].begin() + (r + 1) * w);
      }
    EXPECT_EQ(differing_bits(whole, joined), 0u) << "run_outputs";
  }
  // A pointer inside the weight (a row range) is refused.
  EXPECT_THROW(engine.is_panels(static_cast<const char*>(dw.t.data()) + 64 * k * 2, n - 64, k), Error);
  EXPECT_THROW(engine.is_panels(dw.t.data(), n, k / 2), Error);
  // New values uploaded: row-major again, read as such.
  const auto fresh = random_bf16_values(rng, size_t(n * k));
  backend().upload(to_bf16(fresh).data(), dw.t);
  EXPECT_FALSE(engine.is_panels(dw.t.data(), n, k));
  EXPECT_EQ(engine.panel_bytes(), before);
  {
    DevTensor check = upload_bf16(fresh, {n, k});
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(k), -2.f, 2.f), {1, k});
    DevTensor y0(DType::bf16, {1, n}), y1(DType::bf16, {1, n});
    engine.run(dx.t.data(), check.t.data(), nullptr, y0.t.data(), 1, n, k);
    engine.run(dx.t.data(), dw.t.data(), nullptr, y1.t.data(), 1, n, k);
    EXPECT_EQ(differing_bits(download_bf16(y0), download_bf16(y1)), 0u) << "after the upload";
  }
  // Freed: forgotten with its memory.
  ASSERT_TRUE(engine.store_as_panels(dw.t.data(), n, k));
  dw = DevTensor();
  EXPECT_EQ(engine.panel_bytes(), before);
}

// Sets the persistent warpgroup GEMM's multicast mode (cuda::set_gemm_multicast) for a scope.

// The warpgroup kernel (configurations 11-14: wgmma from tensor-copied, swizzled tiles, a producer
// warpgroup, 5 or 6 stages, one CTA a tile or persistent CTAs — alone or in multicast pairs — or
// one split range a CTA folded by the reduction kernel) gives the bits of the mma.sync kernel's
// fold schedule (configuration 2):
// M not a multiple of 128 (rows past M arrive as zeros), N not a multiple of 8, K tails of 8 and
// 24 (a half 16-wide step; steps wholly past K skipped), K past one split range, 1-8 ranges,
// with and without bias, and fused outputs. On GPUs or builds without it the test is skipped.
TEST(CudaInvariance, WgmmaGemmEqualsTiled) {
  RILL_REQUIRE_GPU();
  if (!cuda::gemm_wgmma_supported()) GTEST_SKIP() << "no sm_90a warpgroup GEMM on this GPU/build";
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct S {
    int64_t m, n, k;
  };
  // (200 × 32008 × 256: one split range. 1000 × 6144 × 1048: 5 ranges, the last one a part of a
  // k tile, several tiles a persistent CTA.)
  const S shapes[] = {{17, 1001, 2056},   {300, 4096, 4096},  {1000, 6144, 4096}, {129, 333, 12296},
                      {512, 4096, 12288}, {256, 24576, 4096}, {77, 520, 1048},    {200, 32008, 256},
                      {1000, 6144, 1048}};
  for (const S& sh : shapes) {
    const auto split = cuda::gemm_split(sh.n, sh.k, backend().info().num_sms);
    SCOPED_TRACE(::testing::Message() << "M=" << sh.m << " N=" << sh.n << " K=" << sh.k << " S=" << split.splits);
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(sh.n * sh.k)), {sh.n, sh.k});
    DevTensor db = upload_bf16(random_bf16_values(rng, size_t(sh.n)), {sh.n});
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(sh.m * sh.k), -2.f, 2.f), {sh.m, sh.k});
    for (bool bias : {false, true}) {
      auto run = [&](int config) {
        DevTensor dy(DType::bf16, {sh.m, sh.n});
        dy.poison();
        cuda::GemmArgs ga = plain_gemm(dx.t.data(), dw.t.data(), bias ? db.t.data() : nullptr, dy.t.data(), sh.m,
                                       sh.n, sh.k, config);
        if (config == 15 || config == 20) {  // the engine's split workspace (20: and its counters)
          const cuda::GemmArgs ws = backend().matmul_engine().gemm_args(nullptr, nullptr, nullptr, sh.m, sh.n, sh.k);
          ga.workspace = ws.workspace;
          ga.workspace_bytes = ws.workspace_bytes;
          if (config == 20) ga.counters = ws.counters, ga.num_counters = ws.num_counters;
        }
        cuda::launch_gemm(ga, backend().stream());
        return download_bf16(dy);
      };
      const std::vector<float> want = run(2);
      // 5 / 6 stages, one CTA a tile / persistent (12 alone and, as -12, in multicast pairs: row tiles
      // 1, 3, 8 of them make whole pairs and a last pair past M); split; 128 × 192; the stream schedule
      // (20: several ranges a CTA, and with fewer units than SMs one unit a CTA, each tile's total
      // carried through a chain of CTAs).
      for (int config : {11, 12, -12, 13, 14, 15, 16, 17, 20}) {
        const MulticastMode mode(config == -12 ? 1 : 0);
        config = std::abs(config);
        if (config == 15) {  // the ranges over CTAs: the partials must fit the engine's workspace
          const cuda::GemmArgs ws = backend().matmul_engine().gemm_args(nullptr, nullptr, nullptr, sh.m, sh.n, sh.k);
          if (size_t(split.splits) * size_t(sh.m * sh.n) * sizeof(float) > ws.workspace_bytes) continue;
        }
        if (config == 20 && split.splits < 2) continue;  // (one range: nothing to share out)
        const std::vector<float> got = run(config);
        for (float v : got) ASSERT_FALSE(std::isnan(v)) << "unwritten output, configuration " << config;
        size_t differ = 0;
        for (size_t i = 0; i < want.size(); ++i) differ += std::memcmp(&want[i], &got[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << "configuration " << config << (cuda::gemm_multicast() == 1 ? " in multicast pairs" : "")
                              << ": outputs differing from configuration 2 of "
                              << want.size() << ", bias " << bias << "; relative error "
                              << rel_error(got, std::vector<double>(want.begin(), want.end()));
      }
    }
  }
  // Fused outputs: three column ranges of one product, written by the warpgroup kernel's epilogue —
  // widths that are multiples of the tile (the compact epilogue) and widths that are not (tiles
  // spanning two outputs: the general one); one CTA a tile and persistent CTAs with several tiles
  // each.
  struct Fused {
    int64_t m, nq, nk, nv;
  };
  for (const Fused& f : {Fused{640, 4096, 1024, 1024}, Fused{1280, 1000, 520, 1576}}) {
    const int64_t m = f.m, nq = f.nq, nk = f.nk, nv = f.nv, n = nq + nk + nv, k = 4096;
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
    DevTensor ref(DType::bf16, {m, n}), q(DType::bf16, {m, nq}), kk(DType::bf16, {m, nk}), v(DType::bf16, {m, nv});
    ref.poison();
    cuda::launch_gemm(plain_gemm(dx.t.data(), dw.t.data(), nullptr, ref.t.data(), m, n, k, 2), backend().stream());
    const auto want = download_bf16(ref);
    for (int config : {11, 12, -12, 20}) {  // (-12: 12 in multicast pairs; 20: the stream schedule)
      const MulticastMode mode(config == -12 ? 1 : 0);
      config = std::abs(config);
      SCOPED_TRACE(::testing::Message() << "fused outputs " << nq << "/" << nk << "/" << nv << ", M=" << m
                                        << ", configuration " << config << ", multicast " << cuda::gemm_multicast());
      for (DevTensor* t : {&q, &kk, &v}) t->poison();
      cuda::GemmArgs a = plain_gemm(dx.t.data(), dw.t.data(), nullptr, nullptr, m, n, k, config);
      if (config == 20) {
        const cuda::GemmArgs ws = backend().matmul_engine().gemm_args(nullptr, nullptr, nullptr, m, n, k);
        a.workspace = ws.workspace, a.workspace_bytes = ws.workspace_bytes;
        a.counters = ws.counters, a.num_counters = ws.num_counters;
      }
      a.num_outs = 3;
      void* outs[] = {q.t.data(), kk.t.data(), v.t.data()};
      const int64_t ends[] = {nq, nq + nk, n};
      for (int s = 0; s < 3; ++s) a.outs[s] = outs[s], a.out_end[s] = ends[s];
      cuda::launch_gemm(a, backend().stream());
      auto gq = download_bf16(q), gk = download_bf16(kk), gv = download_bf16(v);
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_TRUE(same_bits(want.data() + i * n, gq.data() + i * nq, size_t(nq))) << "q row " << i;
        ASSERT_TRUE(same_bits(want.data() + i * n + nq, gk.data() + i * nk, size_t(nk))) << "k row " << i;
        ASSERT_TRUE(same_bits(want.data() + i * n + nq + nk, gv.data() + i * nv, size_t(nv))) << "v row " << i;
      }
    }
  }
}

// SwiGLU in the warpgroup GEMM's epilogue (variant 7): y = bf16(bf16(silu(g)) · u) of the bf16
// gate/up product gives the bits of the GEMM then the SwiGLU kernel — M not a multiple of 128
// (rows past M never written), K tails (200, 1048), one and several split ranges, with and without
// bias; the same for the warpgroup decode kernel's SwiGLU (configuration 18, M ≤ 8; inter a
// multiple of 32, not of 64; the split schedule's in-kernel fold and, without a workspace, the
// fold schedule); and through the backend's matmul_swiglu, which must leave its gate/up scratch
// untouched (the fused path ran) where the shape fills the GPU or, at M ≤ 8 with RILL_DECODE_SWIGLU=1,
// where 18 is the shape's decode configuration, and run the two ops otherwise.

// A SwiGLU GEMM's inputs: w [2·inter, k] (gate rows, then up rows), its bias and x [m, k].
struct GluInputs {
  DevTensor w, bias, x;
};
GluInputs glu_inputs(std::mt19937_64& rng, int64_t m, int64_t inter, int64_t k) {
  GluInputs in;
  in.w = upload_bf16(random_bf16_values(rng, size_t(2 * inter * k)), {2 * inter, k});
  in.bias = upload_bf16(random_bf16_values(rng, size_t(2 * inter)), {2 * inter});
  in.x = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
  return in;
}

TEST(CudaInvariance, SwigluGemmEqualsGemmThenSwiglu) {
  RILL_REQUIRE_GPU();
  (void)backend();  // its creation turns the warpgroup GEMM on where supported
  if (!cuda::gemm_wgmma_enabled()) GTEST_SKIP() << "no sm_90a warpgroup GEMM on this GPU / build";
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  struct S {
    int64_t m, inter, k;
  };
  // (1000 × 1536 × 1048: 3 split ranges, several tiles a persistent CTA.)
  const S shapes[] = {{77, 192, 1048}, {300, 1536, 4096}, {1000, 512, 200}, {129, 64, 12296}, {1000, 1536, 1048}};
  for (const S& sh : shapes) {
    const int64_t n = 2 * sh.inter;
    SCOPED_TRACE(::testing::Message() << "M=" << sh.m << " inter=" << sh.inter << " K=" << sh.k);
    const GluInputs in = glu_inputs(rng, sh.m, sh.inter, sh.k);
    const DevTensor &dw = in.w, &db = in.bias, &dx = in.x;
    for (int pass = 0; pass < 6; ++pass) {  // bias off / on, each alone, in multicast pairs, on the stream schedule
      const bool bias = pass % 2 == 1;
      const MulticastMode mode(pass / 2 == 1 ? 1 : 0);
      const StreamMode stream(pass / 2 == 2 ? 1 : 0);
      SCOPED_TRACE(::testing::Message() << "bias " << bias << ", multicast " << cuda::gemm_multicast() << ", stream "
                                        << cuda::gemm_stream());
      const void* b = bias ? db.t.data() : nullptr;
      DevTensor gate_up(DType::bf16, {sh.m, n}), want(DType::bf16, {sh.m, sh.inter});
      DevTensor got(DType::bf16, {sh.m, sh.inter});
      for (DevTensor* t : {&gate_up, &want, &got}) t->poison();
      cuda::launch_gemm(plain_gemm(dx.t.data(), dw.t.data(), b, gate_up.t.data(), sh.m, n, sh.k, 2),
                        backend().stream());
      cuda::launch_swiglu(gate_up.t.data(), want.t.data(), sh.m, sh.inter, backend().stream());
      cuda::GemmArgs ga = backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), b, sh.m, n, sh.k);
      ga.y = got.t.data();
      ga.glu_inter = sh.inter;
      cuda::launch_gemm(ga, backend().stream());
      const auto w = download_bf16(want), g = download_bf16(got);
      for (float v : g) ASSERT_FALSE(std::isnan(v)) << "unwritten output, bias " << bias;
      EXPECT_EQ(differing_bits(w, g), 0u) << "outputs differing of " << w.size() << ", bias " << bias;
    }
  }
  // M ≤ 8 on configuration 18's 8-row x stage, 9-64 on 19's 16-, 32- and 64-row stages.
  const S decode_shapes[] = {{1, 96, 4096},    {3, 1536, 4096}, {8, 160, 200},   {5, 1024, 12296},
                             {16, 192, 1048},  {29, 1536, 4096}, {33, 96, 1048}, {64, 1536, 4096}};
  for (const S& sh : decode_shapes) {
    const int64_t n = 2 * sh.inter;
    SCOPED_TRACE(::testing::Message() << "decode M=" << sh.m << " inter=" << sh.inter << " K=" << sh.k);
    const GluInputs in = glu_inputs(rng, sh.m, sh.inter, sh.k);
    const DevTensor &dw = in.w, &db = in.bias, &dx = in.x;
    for (bool bias : {false, true}) {
      const void* b = bias ? db.t.data() : nullptr;
      DevTensor gate_up(DType::bf16, {sh.m, n}), want(DType::bf16, {sh.m, sh.inter});
      cuda::launch_gemm(plain_gemm(dx.t.data(), dw.t.data(), b, gate_up.t.data(), sh.m, n, sh.k), backend().stream());
      cuda::launch_swiglu(gate_up.t.data(), want.t.data(), sh.m, sh.inter, backend().stream());
      const auto w = download_bf16(want);
      // Schedule 0 with the engine's workspace: split ranges and the in-kernel fold; without one,
      // and schedules 1 and 2 (which drop it): the fold schedule.
      for (int run = 0; run < 4; ++run) {
        const bool workspace = run != 1;
        DevTensor got(DType::bf16, {sh.m, sh.inter});
        got.poison();
        cuda::GemmArgs ga = workspace ? backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), b, sh.m, n, sh.k)
                                      : plain_gemm(dx.t.data(), dw.t.data(), b, nullptr, sh.m, n, sh.k);
        ga.y = got.t.data();
        ga.glu_inter = sh.inter;
        ga.config = sh.m <= 8 ? 18 : 19;
        ga.glu_schedule = run < 2 ? 0 : run - 1;
        for (int rep = 0; rep < 2; ++rep) {  // (the split schedule's counters reset themselves)
          cuda::launch_gemm(ga, backend().stream());
          EXPECT_EQ(differing_bits(w, download_bf16(got)), 0u)
              << "outputs differing of " << w.size() << ", bias " << bias << ", workspace " << workspace
              << ", schedule " << ga.glu_schedule << ", launch " << rep;
        }
      }
    }
  }
  // Bad arguments are errors, not launches: inter not a multiple of 64 (32 for the decode kernel),
  // N not 2 · inter, more than 8 rows for configuration 18 or 64 for 19, an unknown schedule.
  {
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(192 * 256)), {192, 256});
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(9 * 256)), {9, 256});
    DevTensor dy(DType::bf16, {9, 96});
    cuda::GemmArgs ga = backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), nullptr, 9, 192, 256);
    ga.y = dy.t.data();
    ga.glu_inter = 96;
    ga.config = 18;
    EXPECT_THROW(cuda::launch_gemm(ga, backend().stream()), Error);  // M = 9
    ga.m = 8;
    ga.glu_schedule = 3;
    EXPECT_THROW(cuda::launch_gemm(ga, backend().stream()), Error);  // no schedule 3
    ga.glu_schedule = 0;
    ga.glu_inter = 80;
    EXPECT_THROW(cuda::launch_gemm(ga, backend().stream()), Error);  // inter % 32 != 0
    DevTensor dx65 = upload_bf16(random_bf16_values(rng, size_t(65 * 256)), {65, 256});
    DevTensor dy65(DType::bf16, {65, 96});
    ga = backend().matmul_engine().gemm_args(dx65.t.data(), dw.t.data(), nullptr, 65, 192, 256);
    ga.y = dy65.t.data();
    ga.glu_inter = 96;
    ga.config = 19;
    EXPECT_THROW(cuda::launch_gemm(ga, backend().stream()), Error);  // M = 65
    EXPECT_FALSE(cuda::decode_glu_fold_fits(65, 96, 256, backend().info().num_sms));
  }
  {
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(200 * 256)), {200, 256});
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(300 * 256)), {300, 256});
    DevTensor dy(DType::bf16, {300, 100});
    cuda::GemmArgs ga = backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), nullptr, 300, 200, 256);
    ga.y = dy.t.data();
    ga.glu_inter = 100;
    EXPECT_THROW(cuda::launch_gemm(ga, backend().stream()), Error);
    ga.glu_inter = 64;
    EXPECT_THROW(cuda::launch_gemm(ga, backend().stream()), Error);
    EXPECT_FALSE(cuda::gemm_swiglu_fits(300, 100, 256, backend().info().num_sms));
  }
  // Through the backend: 300 × 1536 × 4096 fills the GPU (3 × 24 tiles of 128 × 128), so the fused
  // kernel runs and the scratch stays poisoned; 65 rows is not decode-sized and does not fill the GPU, the two ops
  // run; 1-64 rows take the decode kernel's SwiGLU as RILL_DECODE_SWIGLU says (MatmulEngine::run_swiglu):
  // with the fold schedule (the default) where inter's column tiles fill a wave of CTAs — not at
  // inter 1536, at the smallest inter that does (k 256).
  const int sms = backend().info().num_sms;
  auto wave_inter = [&](int64_t m) -> int64_t {
    for (int64_t inter = 32; inter <= 32 * 8192; inter += 32)
      if (cuda::decode_glu_fold_fits(m, inter, 256, sms)) return inter;
    return 0;
  };
  std::vector<S> through = {{300, 1536, 4096}, {65, 1536, 4096}, {1, 1536, 4096}, {5, 1536, 4096}};
  for (int64_t m : {1, 5, 16, 32, 40, 64})
    if (const int64_t inter = wave_inter(m)) through.push_back({m, inter, 256});
  for (const S& sh : through) {
    const int64_t m = sh.m, inter = sh.inter, k = sh.k;
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(2 * inter * k)), {2 * inter, k});
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
    DevTensor gate_up(DType::bf16, {m, 2 * inter}), want(DType::bf16, {m, inter}), got(DType::bf16, {m, inter});
    for (DevTensor* t : {&gate_up, &want, &got}) t->poison();
    backend().matmul(dx.t, dw.t, nullptr, gate_up.t);
    backend().swiglu(gate_up.t, want.t);
    gate_up.poison();
    backend().matmul_swiglu(dx.t, dw.t, nullptr, gate_up.t, got.t);
    const auto w = download_bf16(want), g = download_bf16(got), scratch = download_bf16(gate_up);
    EXPECT_TRUE(same_bits(w.data(), g.data(), w.size())) << "M=" << m;
    const bool fused = std::all_of(scratch.begin(), scratch.end(), [](float v) { return std::isnan(v); });
    const bool fits = cuda::gemm_swiglu_fits(m, inter, k, sms);
    cuda::GemmArgs ga = backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), nullptr, m, 2 * inter, k);
    ga.y = gate_up.t.data();
    const int mode = backend().decode_swiglu();
    bool decode = false;
    if (m <= backend().matmul_engine().decode_rows() && mode > 0) {
      const int config = backend().matmul_engine().decode_config_for(ga);
      decode = mode == 1 ? m <= 8 && config == 18
                         : cuda::decode_glu_fold_fits(m, inter, k, sms) && (config == 18 || config == 19);
    }
    EXPECT_EQ(fused, (m > backend().matmul_engine().decode_rows() && fits) || decode)
        << "M=" << m << " inter=" << inter << " mode " << mode;
  }
}

// Fused outputs (q/k/v from one weight) and the in-kernel split fold (tile counters): the
// outputs hold exactly the columns of the one GEMM computed by the fold schedule with no
// workspace, for decode-sized and larger M, launch after launch (the counters reset themselves).
TEST(CudaInvariance, FusedOutputsAndInKernelFoldEqualOneGemm) {
  RILL_REQUIRE_GPU();
  ASSERT_TRUE(backend().batch_invariant());
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const int64_t nq = 1024, nk = 256, nv = 256, n = nq + nk + nv, k = 4096;
  DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
  DevTensor db = upload_bf16(random_bf16_values(rng, size_t(n)), {n});
  for (int64_t m : {1, 3, 16, 77}) {
    SCOPED_TRACE(::testing::Message() << "M=" << m);
    DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k), -2.f, 2.f), {m, k});
    for (bool bias : {false, true}) {
      DevTensor ref(DType::bf16, {m, n});
      ref.poison();
      // No workspace, no counters: one CTA folds every range.
      cuda::launch_gemm(plain_gemm(dx.t.data(), dw.t.data(), bias ? db.t.data() : nullptr, ref.t.data(), m, n, k),
                        backend().stream());
      auto want = download_bf16(ref);
      for (int rep = 0; rep < 3; ++rep) {
        DevTensor whole(DType::bf16, {m, n}), q(DType::bf16, {m, nq}), kk(DType::bf16, {m, nk}), v(DType::bf16, {m, nv});
        whole.poison();
        q.poison();
        kk.poison();
        v.poison();
        backend().matmul(dx.t, dw.t, bias ? &db.t : nullptr, whole.t);
        Tensor* const outs[] = {&q.t, &kk.t, &v.t};
        backend().matmul_outputs(dx.t, dw.t, bias ? &db.t : nullptr, outs);
        auto got = download_bf16(whole), gq = download_bf16(q), gk = download_bf16(kk), gv = download_bf16(v);
        ASSERT_TRUE(same_bits(want.data(), got.data(), want.size())) << "matmul, launch " << rep << " bias " << bias;
        for (int64_t i = 0; i < m; ++i) {
          ASSERT_TRUE(same_bits(want.data() + i * n, gq.data() + i * nq, size_t(nq))) << "q row " << i;
          ASSERT_TRUE(same_bits(want.data() + i * n + nq, gk.data() + i * nk, size_t(nk))) << "k row " << i;
          ASSERT_TRUE(same_bits(want.data() + i * n + nq + nk, gv.data() + i * nv, size_t(nv))) << "v row " << i;
        }
      }
    }
  }
}

// For a profiler: each decode configuration once on the 8B gate projection shape (M = 1; RILL_GEMM_M=ROWS:
// that many rows, where from 9 rows only configuration 19 runs). Not an assertion (DISABLED_;
// tools/gpu_run.sh runs it under Nsight Compute).
TEST(CudaInvariance, DISABLED_GemmDecodeProfile) {
  RILL_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  int64_t m = 1;
  if (const char* rows = std::getenv("RILL_GEMM_M"); rows && *rows) {
    char* end = nullptr;
    m = std::strtoll(rows, &end, 10);
    ASSERT_TRUE(m > 0 && m <= 64 && *end == '\0') << "RILL_GEMM_M: expected 1-64 rows, got '" << rows << "'";
  }
  const int64_t n = 12288, k = 4096;
  DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
  DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k)), {m, k}), dy(DType::bf16, {m, n});
  const std::vector<int> configs = m <= 8 ? backend().matmul_engine().decode_configs() : std::vector<int>{19};
  for (int config : configs) {
    cuda::GemmArgs a = backend().matmul_engine().gemm_args(dx.t.data(), dw.t.data(), nullptr, m, n, k);
    a.y = dy.t.data();
    a.config = config;
    cuda::launch_gemm(a, backend().stream());
  }
  backend().synchronize();
}

// Timing, printed: the invariant GEMM vs the autotuned path (cuBLASLt / matvec) at the 8B-model
// shapes. GB/s = weight bytes / time (M ≤ 8), TFLOP/s = 2·M·N·K / time. L2 is overwritten before
// every timed run.
TEST(CudaInvariance, DISABLED_GemmTiming) {
  RILL_REQUIRE_GPU();
  std::mt19937_64 rng(fresh_seed());
  auto& engine = backend().matmul_engine();
  ColdTimer time_us;
  const bool configs = std::getenv("RILL_GEMM_CONFIGS") != nullptr;
  // RILL_GEMM_CONFIGS=12,16: those configurations only (any other value: all of them).
  std::vector<int> config_list;
  for (const char* p = configs ? std::getenv("RILL_GEMM_CONFIGS") : ""; *p;) {
    char* end = nullptr;
    const long c = std::strtol(p, &end, 10);
    if (end == p) break;
    if (c > 1) config_list.push_back(int(c));
    p = *end == ',' ? end + 1 : end;
  }
  if (config_list.empty()) config_list = {2, 3, 4, 11, 12, 13, 14, 16, 17};
  // Decode: the 8B model's o, q/k/v, gate (a half of gate_up), down and lm_head shapes; prefill
  // (RILL_GEMM_CONFIGS): its four projections (q/k/v fused, o, gate_up fused, down) and 12288 × 4096.
  // RILL_GEMM_SHAPES="N:K,N:K,...": those (N, K) instead (with RILL_GEMM_CONFIGS; e.g. one N at several K
  // separates a tile's fixed cost from its per-k cost).
  std::vector<std::pair<int64_t, int64_t>> nk =
      configs ? std::vector<std::pair<int64_t, int64_t>>{{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288},
                                                         {12288, 4096}}
              : std::vector<std::pair<int64_t, int64_t>>{{4096, 4096}, {6144, 4096}, {12288, 4096}, {4096, 12288},
                                                         {151936, 4096}};
  if (const char* shapes = std::getenv("RILL_GEMM_SHAPES"); configs && shapes && *shapes) {
    nk.clear();
    for (const char* p = shapes; *p;) {
      char* end = nullptr;
      const long long n = std::strtoll(p, &end, 10);
      long long k = 0;
      if (end != p && *end == ':') k = std::strtoll(end + 1, &end, 10);
      ASSERT_TRUE(n > 0 && k > 0 && (*end == ',' || *end == '\0'))
          << "RILL_GEMM_SHAPES: expected N:K pairs joined by commas, got '" << shapes << "'";
      nk.emplace_back(n, k);
      p = *end == ',' ? end + 1 : end;
    }
  }
  // RILL_GEMM_M: one M (with RILL_GEMM_CONFIGS) instead of 512 and 4096.
  std::vector<int64_t> ms = {512, 4096};
  if (const char* only_m = std::getenv("RILL_GEMM_M"); configs && only_m && *only_m) {
    char* end = nullptr;
    const long long m = std::strtoll(only_m, &end, 10);
    ASSERT_TRUE(m > 0 && *end == '\0') << "RILL_GEMM_M: expected a positive row count, got '" << only_m << "'";
    ms = {m};
  }
  for (auto [n, k] : nk) {
    DevTensor dw = upload_bf16(random_bf16_values(rng, size_t(n * k)), {n, k});
    if (configs) {  // prefill tile configurations side by side
      for (int64_t m : ms) {
        DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k)), {m, k}), dy(DType::bf16, {m, n});
        for (int config : config_list) {
          if (config >= 11 && !cuda::gemm_wgmma_supported()) continue;
          cuda::GemmArgs a = engine.gemm_args(dx.t.data(), dw.t.data(), nullptr, m, n, k);
          a.y = dy.t.data();
          // The fold schedule: the main loop alone (15: the split ranges and their reduction; 20: the
          // stream schedule, which needs the workspace and the counters).
          if (config != 15 && config != 20) a.workspace = nullptr;
          a.config = config;
          double t = time_us([&] { cuda::launch_gemm(a, backend().stream()); });
          std::printf("GEMM config %d M=%5lld N=%6lld K=%5lld: %8.1f us %6.1f TFLOP/s\n", config, (long long)m,
                      (long long)n, (long long)k, t, 2.0 * double(m * n) * double(k) / t * 1e-6);
        }
      }
      continue;
    }
    const char* max_m = std::getenv("RILL_GEMM_TIMING_MAX_M");  // e.g. 8: the decode shapes only
    for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 512, 4096}) {
      if (n == 151936 && m > 512) continue;
      if (max_m && m > std::atoll(max_m)) continue;
      DevTensor dx = upload_bf16(random_bf16_values(rng, size_t(m * k)), {m, k}), dy(DType::bf16, {m, n});
      cuda::MatmulChoice inv{cuda::MatmulChoice::Path::invariant, 1, 0};
      double t_inv = time_us([&] { engine.run_with(inv, dx.t.data(), dw.t.data(), nullptr, dy.t.data(), m, n, k); });
      double best = 1e30;
      std::string best_name;
      for (const auto& c : engine.candidates(dx.t.data(), dw.t.data(), nullptr, dy.t.data(), m, n, k)) {
        double t = time_us([&] { engine.run_with(c, dx.t.data(), dw.t.data(), nullptr, dy.t.data(), m, n, k); });
        if (t < best) best = t, best_name = c.describe();
      }
      const double bytes = double(n * k * 2), flops = 2.0 * double(m) * double(n) * double(k);
      auto split = cuda::gemm_split(n, k, backend().info().num_sms);
      if (m <= 8) {  // the decode tile configurations side by side (same bits)
        cuda::GemmArgs a = engine.gemm_args(dx.t.data(), dw.t.data(), nullptr, m, n, k);
        a.y = dy.t.data();
        for (auto [config, us] : engine.time_decode_configs(a))
          std::printf("GEMM decode config %d M=%5lld N=%6lld K=%5lld S=%2d: %8.1f us %7.0f GB/s\n", config,
                      (long long)m, (long long)n, (long long)k, split.splits, us, bytes / us * 1e-3);
      }
      if (m <= 64 && cuda::gemm_wgmma_supported() && split.splits > 1) {
        // As in a captured decode step: the warpgroup decode GEMM leaving its split partials (GemmArgs::defer),
        // then, apart, the fold of them into the product (launch_gemm_fold; in the graph the reading op folds
        // on load instead).
        cuda::GemmArgs a = engine.gemm_args(dx.t.data(), dw.t.data(), nullptr, m, n, k);
        a.y = dy.t.data();
        a.config = m <= 8 ? 18 : 19;
        cuda::GemmPartials parts;
        a.defer = &parts;
        const double t_gemm = time_us([&] { cuda::launch_gemm(a, backend().stream()); });
        const double t_fold = parts.ws ? time_us([&] { cuda::launch_gemm_fold(parts, backend().stream()); }) : 0.0;
        std::printf("GEMM deferred config %d M=%5lld N=%6lld K=%5lld S=%2d: %8.1f us %7.0f GB/s, partials %5.1f MB, "
                    "their fold apart %6.1f us\n",
                    a.config, (long long)m, (long long)n, (long long)k, split.splits, t_gemm, bytes / t_gemm * 1e-3,
                    parts.ws ? double(parts.splits) * double(m * n) * 4e-6 : 0.0, t_fold);
      }
      std::printf("GEMM M=%5lld N=%6lld K=%5lld S=%2d | invariant %8.1f us %7.0f GB/s %6.1f TFLOP/s | "
                  "best %-22s %8.1f us %7.0f GB/s %6.1f TFLOP/s | ratio %.2f\n",
                  (long long)m, (long long)n, (long long)k, split.splits, t_inv, bytes / t_inv * 1e-3,
                  flops / t_inv * 1e-6, best_name.c_str(), best, bytes / best * 1e-3, flops / best * 1e-6,
                  best / t_inv);
    }
  }
}

}  // namespace
}  // namespace rill
