// cli/cmd_bench.cpp — `rill bench`: prefill and decode throughput of a model on one device.
// Prefill: `batch` rows of `prompt-len` random tokens in one step each; decode: `batch` rows
// advancing one token per step from that context. Timed after a warm-up step, with the device
// synchronised; figures go to stdout as one line each so scripts can collect them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model.h"

namespace rill::cli {
namespace {

struct BenchArgs {
  std::string model, device = "auto";
  std::vector<int32_t> prompt_lens{512}, batches{1};
  int32_t prompt_len = 512, decode_tokens = 64, batch = 1, block_size = 16;
  bool no_graphs = false;
  bool host_times = false;
  bool sync_steps = false;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One (prompt length, batch) measurement on a loaded model.
void bench_one(const BenchArgs& a, const std::filesystem::path& dir, Kernels& kernels, Model& model);

void bench(const BenchArgs& a) {
  if (a.decode_tokens < 1) fail("--decode-tokens: must be ≥ 1, got {}", a.decode_tokens);
  for (int32_t p : a.prompt_lens)
    if (p < 1) fail("--prompt-len: must be ≥ 1, got {}", p);
  for (int32_t b : a.batches)
    if (b < 1) fail("--batch: must be ≥ 1, got {}", b);
  std::filesystem::path dir = resolve_model_dir(a.model);
  auto kernels = make_kernels(a.device);
  auto t0 = std::chrono::steady_clock::now();
  LoadOptions load;
  load.cuda_graphs = !a.no_graphs;
  auto model = load_model(dir, *kernels, load);
  logger().info("loaded {} ({:.2f} GB of weights) in {:.2f} s on {}", dir.string(), double(model->weight_bytes()) / 1e9,
                seconds_since(t0), kernels->device() == Device::cuda ? "cuda" : "cpu");
  // Every prompt length with every batch size, one after another on the loaded model.
  for (int32_t batch : a.batches)
    for (int32_t prompt : a.prompt_lens) {
      BenchArgs one = a;
      one.batch = batch;
      one.prompt_len = prompt;
      bench_one(one, dir, *kernels, *model);
    }
}

void bench_one(const BenchArgs& a, const std::filesystem::path& dir, Kernels& kernels, Model& model) {
  const ModelConfig& cfg = model.config();
  // Two untimed decode steps first: a new batch shape picks its kernels on its first step and is
  // recorded into a step graph on its second.
  constexpr int32_t kWarmSteps = 2;
  const int32_t context = a.prompt_len + a.decode_tokens + kWarmSteps + 1;
  if (context > cfg.max_position_embeddings)
    fail("--prompt-len + --decode-tokens ({}) exceeds the model's context of {}", context, cfg.max_position_embeddings);
  const int32_t blocks_per_row = (context + a.block_size - 1) / a.block_size;
  KvBuffers kv(kernels, model.kv_spec(), blocks_per_row * a.batch, a.block_size);
  std::vector<std::vector<int32_t>> tables(size_t(a.batch));
  for (int32_t r = 0; r < a.batch; ++r)
    for (int32_t b = 0; b < blocks_per_row; ++b) tables[size_t(r)].push_back(r * blocks_per_row + b);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> token(0, int32_t(cfg.vocab_size) - 1);

  // Warm-up: one short step (kernel selection, arena growth, page faults of the weights).
  {
    StepBatchBuilder b(a.block_size);
    std::vector<int32_t> t{token(rng), token(rng)};
    b.add_row(t, 0, tables[0], Logits::last);
    model.forward(b.build(), kv.layers());
    kernels.synchronize();
  }
  // One untimed prefill of the full prompt length first: the step arena grows to the prompt's
  // size once (device allocations), which a server pays on its first long prompt only. Its time
  // is printed as the cold figure; the timed prompts below are the steady state.
  double cold_s = 0;
  {
    std::vector<int32_t> prompt(size_t(a.prompt_len));
    for (int32_t& t : prompt) t = token(rng);
    StepBatchBuilder b(a.block_size);
    b.add_row(prompt, 0, tables[0], Logits::last);
    StepBatch step = b.build();
    auto t1 = std::chrono::steady_clock::now();
    model.forward(step, kv.layers());
    kernels.synchronize();
    cold_s = seconds_since(t1);
  }
  Progress progress("prefill");
  double prefill_s = 0;
  for (int32_t r = 0; r < a.batch; ++r) {
    std::vector<int32_t> prompt(size_t(a.prompt_len));
    for (int32_t& t : prompt) t = token(rng);
    StepBatchBuilder b(a.block_size);
    b.add_row(prompt, 0, tables[size_t(r)], Logits::last);
    StepBatch step = b.build();
    auto t1 = std::chrono::steady_clock::now();
    model.forward(step, kv.layers());
    kernels.synchronize();
    prefill_s += seconds_since(t1);
    progress.update(r + 1, a.batch, "rows");
  }
  progress.finish();
  // Decode is greedy: each step's new tokens are the ids the previous step picked on the device
  // (argmax), and only those ids come back to the host. By default a step is queued before the
  // previous step's ids are read — they reach it on the device (StepBatch::token_source) and the
  // host reads them one step behind (a Readback), as a server overlapping its bookkeeping with the
  // device would — so the device does not idle while the host reads, builds and launches.
  // --sync-steps waits for each step's ids before building the next (the host feeds them).
  const size_t id_bytes = size_t(a.batch) * sizeof(int32_t);
  Buffer ids_buffers[2] = {Buffer(kernels.allocator(), id_bytes), Buffer(kernels.allocator(), id_bytes)};
  std::unique_ptr<Readback> readbacks[2] = {kernels.make_readback(id_bytes), kernels.make_readback(id_bytes)};
  std::vector<int32_t> ids(size_t(a.batch));
  for (int32_t& t : ids) t = token(rng);
  Progress dprogress("decode");
  // --host-times: where a timed step's host time goes, in µs: building the batch, forward() (the
  // metadata upload and the graph launch), queueing argmax and the ids' copy, and waiting for ids
  // (with --sync-steps this step's, mostly the device's time; else the previous step's, which
  // arrive while this step runs).
  std::vector<double> t_build, t_forward, t_argmax, t_download;
  const int32_t steps = a.decode_tokens + kWarmSteps;
  auto timed_from = std::chrono::steady_clock::now();
  StepBatchBuilder builder(a.block_size);
  std::vector<int32_t> one{0};
  for (int32_t s = 0; s < steps; ++s) {
    if (s == kWarmSteps) {
      // The timed steps start from an idle device: drain the untimed ones (the ids' copy included).
      readbacks[(s - 1) % 2]->wait();
      kernels.synchronize();
      timed_from = std::chrono::steady_clock::now();
    }
    const bool device_fed = !a.sync_steps && s > 0;
    auto t0 = std::chrono::steady_clock::now();
    builder.reset();
    for (int32_t r = 0; r < a.batch; ++r) {
      one[0] = device_fed ? 0 : ids[size_t(r)];
      builder.add_row(one, a.prompt_len + s, tables[size_t(r)], Logits::last);
    }
    if (device_fed) builder.tokens_from(ids_buffers[(s - 1) % 2].as(DType::i32, {a.batch}));
    const StepBatch& step = builder.finish();
    auto t1 = std::chrono::steady_clock::now();
    Tensor logits = model.forward(step, kv.layers());
    auto t2 = std::chrono::steady_clock::now();
    Tensor picked = ids_buffers[s % 2].as(DType::i32, {a.batch});
    kernels.argmax(logits, picked);
    readbacks[s % 2]->start(picked);
    auto t3 = std::chrono::steady_clock::now();
    // With --sync-steps this step's ids; else the previous step's (the last step's after the loop).
    const int32_t read = a.sync_steps ? s : s - 1;
    if (read >= 0)
      std::copy_n(static_cast<const int32_t*>(readbacks[read % 2]->wait()), a.batch, ids.begin());
    if (s >= kWarmSteps) {
      auto us = [](auto from, auto to) { return std::chrono::duration<double, std::micro>(to - from).count(); };
      t_build.push_back(us(t0, t1));
      t_forward.push_back(us(t1, t2));
      t_argmax.push_back(us(t2, t3));
      t_download.push_back(us(t3, std::chrono::steady_clock::now()));
    }
    dprogress.update(s + 1, steps, "steps");
  }
  if (!a.sync_steps) std::copy_n(static_cast<const int32_t*>(readbacks[(steps - 1) % 2]->wait()), a.batch, ids.begin());
  const double decode_s = seconds_since(timed_from);
  dprogress.finish();
  const double prefill_tps = double(a.prompt_len) * a.batch / prefill_s;
  const double decode_tps = double(a.decode_tokens) * a.batch / decode_s;
  std::printf("model %s device %s batch %d prompt %d\n", dir.filename().string().c_str(),
              kernels.device() == Device::cuda ? "cuda" : "cpu", a.batch, a.prompt_len);
  std::printf("prefill_tokens_per_s %.1f\n", prefill_tps);
  std::printf("prefill_cold_tokens_per_s %.1f (first prompt of this length, step arena growing)\n",
              double(a.prompt_len) / cold_s);
  std::printf("decode_tokens_per_s %.2f (%.2f ms/step at context %d..%d; %s)\n", decode_tps,
              1e3 * decode_s / a.decode_tokens, a.prompt_len, a.prompt_len + a.decode_tokens,
              a.sync_steps ? "each step's ids read before the next" : "ids fed on the device, read one step behind");
  if (a.host_times) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    std::printf("decode_host_us build %.1f forward %.1f argmax %.1f ids %.1f (medians of %d steps)\n",
                median(t_build), median(t_forward), median(t_argmax), median(t_download), a.decode_tokens);
  }
  std::printf("weight_bytes %zu\n", model.weight_bytes());
  std::fflush(stdout);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure prefill and decode tokens/s of a model (prefill timed after one untimed prompt of the same "
      "length, also printed as prefill_cold_tokens_per_s; decode after two untimed steps)");
  cmd->add_option("--model,model", args->model, "Model directory (default: the built-in default model)");
  cmd->add_option("--device", args->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--prompt-len", args->prompt_lens, "Prompt tokens per row (a comma list runs each)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--decode-tokens", args->decode_tokens, "Decode steps to time")->capture_default_str();
  cmd->add_option("--batch", args->batches, "Rows decoded together (a comma list runs each)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--no-cuda-graphs", args->no_graphs, "Decode without step graphs (CUDA; compare with the default)");
  cmd->add_flag("--sync-steps", args->sync_steps,
                "Decode: wait for each step's ids on the host before queueing the next (default: the next step "
                "takes them on the device and the host reads them one step behind)");
  cmd->add_flag("--host-times", args->host_times,
                "Also print where a decode step's host time goes (batch build, forward: upload and launch, "
                "argmax: queueing it and the ids' copy, ids: waiting for them), medians in µs");
  cmd->callback([args] { bench(*args); });
}

}  // namespace rill::cli
