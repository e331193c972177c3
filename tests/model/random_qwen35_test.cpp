// `rill make-model` Qwen3.5 shapes: qwen3.5-tiny (the qwen3.5-9b structure at test size) writes a
// config and weights that load_model accepts as the hybrid family on the CPU, with the 9B layer
// pattern (full attention every 4th layer), and the model runs: finite logits, and prefill then
// cached decode equal to one full forward (the GDN state carried across steps).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/dtype.h"
#include "kernels/kernels.h"
#include "model/kv_buffers.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/step_batch.h"

namespace rill {
namespace {
namespace fs = std::filesystem;

TEST(RandomQwen35, TinyShapeLoadsAndDecodesLikeAFullForward) {
  const fs::path dir = fs::temp_directory_path() / ("rill_random_qwen35_" + std::to_string(::getpid()));
  RandomModelOptions o;
  o.shape = "qwen3.5-tiny";
  o.out_dir = dir;
  o.seed = 3;
  make_random_model(o);
  std::ifstream in(dir / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(in);
  EXPECT_EQ(cfg["architectures"][0], "Qwen3_5ForCausalLM");
  ASSERT_EQ(cfg["layer_types"].size(), 4u);
  EXPECT_EQ(cfg["layer_types"][3], "full_attention");
  EXPECT_EQ(cfg["layer_types"][0], "linear_attention");

  auto kernels = make_cpu_kernels();
  LoadOptions lo;
  lo.verbose = false;
  std::unique_ptr<Model> model = load_model(dir, *kernels, lo);
  const int64_t V = model->config().vocab_size;
  EXPECT_EQ(V, 1000);
  constexpr int32_t kBlock = 16;
  KvBuffers kv(*kernels, model->kv_spec(), 16, kBlock);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % 1000);
  auto run = [&](std::span<const int32_t> toks, int32_t start, std::vector<int32_t> blocks, Logits mode) {
    StepBatchBuilder b(kBlock);
    b.add_row(toks, start, blocks, mode);
    StepBatch batch = b.build();
    Tensor logits = model->forward(batch, kv.layers());
    std::vector<float> out(size_t(logits.numel()));
    kernels->download(logits, out.data());
    return out;
  };
  const std::vector<float> full = run(ids, 0, {0, 1, 2}, Logits::all);
  ASSERT_EQ(full.size(), ids.size() * size_t(V));
  float mx = 0;
  for (float x : full) {
    ASSERT_TRUE(std::isfinite(x));
    mx = std::max(mx, std::fabs(x));
  }
  EXPECT_GT(mx, 0.1f);  // not a degenerate all-zero model
  // Another sequence (blocks 3..5): 30 tokens, then one at a time.
  std::vector<float> part = run(std::span(ids).first(30), 0, {3, 4, 5}, Logits::last);
  for (int32_t t = 30; t < 40; ++t) {
    float d = 0;
    for (int64_t v = 0; v < V; ++v) d = std::max(d, std::fabs(part[size_t(v)] - full[size_t((t - 1) * V + v)]));
    EXPECT_LE(d, 1e-4f) << "position " << t - 1;
    part = run(std::span(ids).subspan(size_t(t), 1), t, {3, 4, 5}, Logits::last);
  }
  model.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rill
