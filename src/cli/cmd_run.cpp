// cli/cmd_run.cpp — `rill run`: generate from a prompt (token ids now; text with a tokenizer).
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generator.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model.h"

namespace rill::cli {
namespace {

struct RunArgs {
  std::string model, device = "auto", prompt_ids, dtype = "auto";
  int32_t max_tokens = 128;
  SamplingOptions sampling;
  bool print_ids = false;
  bool seed_given = false;
};

std::optional<DType> parse_weight_dtype(const std::string& s) {
  if (s == "auto") return std::nullopt;
  DType t;
  if (!parse_dtype(s, t) || (t != DType::f32 && t != DType::bf16))
    fail("--dtype: '{}' is not a weight dtype (auto, f32, bf16)", s);
  return t;
}

void run(const RunArgs& a) {
  if (a.max_tokens < 1) fail("--max-tokens: must be ≥ 1, got {}", a.max_tokens);
  if (a.sampling.temperature < 0) fail("--temperature: must be ≥ 0, got {}", a.sampling.temperature);
  if (!(a.sampling.top_p > 0 && a.sampling.top_p <= 1)) fail("--top-p: must be in (0, 1], got {}", a.sampling.top_p);
  if (a.sampling.top_k < 0) fail("--top-k: must be ≥ 0, got {}", a.sampling.top_k);
  if (a.prompt_ids.empty()) fail("--prompt-ids: a prompt is required (e.g. --prompt-ids 1,2,3)");
  std::filesystem::path dir = resolve_model_dir(a.model);
  auto kernels = make_kernels(a.device);
  auto t0 = std::chrono::steady_clock::now();
  auto model = load_model(dir, *kernels, LoadOptions{parse_weight_dtype(a.dtype), true});
  const ModelConfig& cfg = model->config();
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  logger().info("loaded {} ({}, {:.2f} GB of weights) in {:.2f} s", dir.string(), cfg.architecture,
                double(model->weight_bytes()) / 1e9, load_s);
  std::vector<int32_t> prompt = parse_ids(a.prompt_ids, cfg.vocab_size, "--prompt-ids");
  int64_t context = int64_t(prompt.size()) + a.max_tokens;
  if (context > cfg.max_position_embeddings)
    fail("--max-tokens: prompt ({}) + max tokens ({}) exceeds the model's context of {} tokens", prompt.size(),
         a.max_tokens, cfg.max_position_embeddings);
  SamplingOptions sampling = a.sampling;
  if (!a.seed_given) sampling.seed = std::random_device{}();
  Generator gen(*model, int32_t(context));
  HostSampler sampler(sampling);

  auto t1 = std::chrono::steady_clock::now();
  std::vector<float> logits = gen.feed(prompt);
  auto t2 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  const char* finish = "length";
  for (int32_t i = 0; i < a.max_tokens; ++i) {
    int32_t next = sampler.sample(std::move(logits));
    out.push_back(next);
    if (std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), next) != cfg.eos_token_ids.end()) {
      finish = "eos";
      break;
    }
    if (i + 1 < a.max_tokens) logits = gen.feed({next});
  }
  auto t3 = std::chrono::steady_clock::now();
  std::string line;
  for (size_t i = 0; i < out.size(); ++i) line += (i ? " " : "") + std::to_string(out[i]);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  double prefill_s = std::chrono::duration<double>(t2 - t1).count();
  double decode_s = std::chrono::duration<double>(t3 - t2).count();
  logger().info("prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s ({:.1f} tok/s); finish: {}",
                prompt.size(), prefill_s, double(prompt.size()) / prefill_s, out.size(), decode_s,
                out.size() > 1 ? double(out.size() - 1) / decode_s : 0.0, finish);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate tokens from a prompt with a model");
  cmd->add_option("--model", args->model, "Model directory (default: the built-in default model)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as token ids, e.g. 1,2,3");
  cmd->add_option("--max-tokens", args->max_tokens, "Most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->sampling.temperature, "Sampling temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->sampling.top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str();
  cmd->add_option("--seed", args->sampling.seed, "Random seed (default: random)")
      ->each([args](const std::string&) { args->seed_given = true; });
  cmd->add_flag("--print-ids", args->print_ids, "Print the generated token ids on one line");
  cmd->add_option("--device", args->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Weight dtype on the device: auto (as stored), f32, bf16")
      ->capture_default_str();
  cmd->callback([args] { run(*args); });
}

}  // namespace rill::cli
