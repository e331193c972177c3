// cli/cmd_run.cpp — `rill run`: generate from a prompt given as token ids (--prompt-ids) or text
// (--prompt, through the model's tokenizer), or chat interactively (--chat, through its chat
// template), streaming text as it is decoded.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/generator.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model.h"
#include "text/chat_template.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace rill::cli {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct RunArgs {
  std::string model, device = "auto", prompt_ids, prompt, dtype = "auto", system, chat_kwargs = "{}";
  int32_t max_tokens = 128;
  int32_t max_context = 0;
  SamplingOptions sampling;
  bool print_ids = false, chat = false, seed_given = false, no_special = false;
};

std::optional<DType> parse_weight_dtype(const std::string& s) {
  if (s == "auto") return std::nullopt;
  DType t;
  if (!parse_dtype(s, t) || (t != DType::f32 && t != DType::bf16))
    fail("--dtype: '{}' is not a weight dtype (auto, f32, bf16)", s);
  return t;
}

void validate(const RunArgs& a) {
  if (a.max_tokens < 1) fail("--max-tokens: must be ≥ 1, got {}", a.max_tokens);
  if (a.sampling.temperature < 0) fail("--temperature: must be ≥ 0, got {}", a.sampling.temperature);
  if (!(a.sampling.top_p > 0 && a.sampling.top_p <= 1)) fail("--top-p: must be in (0, 1], got {}", a.sampling.top_p);
  if (a.sampling.top_k < 0) fail("--top-k: must be ≥ 0, got {}", a.sampling.top_k);
  int given = int(!a.prompt_ids.empty()) + int(!a.prompt.empty()) + int(a.chat);
  if (given == 0) fail("a prompt is required: --prompt TEXT, --prompt-ids 1,2,3 or --chat");
  if (given > 1) fail("--prompt, --prompt-ids and --chat are exclusive: give one");
}

struct Session {
  std::unique_ptr<Kernels> kernels;
  std::unique_ptr<Model> model;
  fs::path dir;
  std::optional<text::Tokenizer> tokenizer;
  std::vector<int32_t> stop_ids;
};

Session open(const RunArgs& a, bool need_tokenizer) {
  Session s;
  s.dir = resolve_model_dir(a.model);
  if (need_tokenizer && !fs::exists(s.dir / "tokenizer.json"))
    fail("{}: no tokenizer.json, so text prompts cannot be encoded; use --prompt-ids", s.dir.string());
  if (fs::exists(s.dir / "tokenizer.json")) s.tokenizer = text::Tokenizer::load(s.dir);
  s.kernels = make_kernels(a.device);
  auto t0 = Clock::now();
  s.model = load_model(s.dir, *s.kernels, LoadOptions{parse_weight_dtype(a.dtype), true});
  const ModelConfig& cfg = s.model->config();
  logger().info("loaded {} ({}, {:.2f} GB of weights, {}) in {:.2f} s", s.dir.string(), cfg.architecture,
                double(s.model->weight_bytes()) / 1e9, s.kernels->device() == Device::cuda ? "cuda" : "cpu",
                std::chrono::duration<double>(Clock::now() - t0).count());
  s.stop_ids = cfg.eos_token_ids;
  if (s.tokenizer && s.tokenizer->eos_id() &&
      std::find(s.stop_ids.begin(), s.stop_ids.end(), *s.tokenizer->eos_id()) == s.stop_ids.end())
    s.stop_ids.push_back(*s.tokenizer->eos_id());
  return s;
}

struct TurnResult {
  std::vector<int32_t> ids;
  std::string text;
  const char* finish = "length";
};

// Generates after `gen` has been fed the prompt (whose last logits are `logits`), streaming text.
TurnResult generate(Session& s, Generator& gen, TokenPicker& picker, Tensor logits, int32_t max_tokens,
                    bool stream_text) {
  TurnResult r;
  std::optional<text::IncrementalDetokenizer> detok;
  if (s.tokenizer) detok.emplace(*s.tokenizer, /*skip_special_tokens=*/true);
  for (int32_t i = 0; i < max_tokens; ++i) {
    int32_t next = picker.pick(logits);
    bool stop = std::find(s.stop_ids.begin(), s.stop_ids.end(), next) != s.stop_ids.end();
    r.ids.push_back(next);
    if (detok) {
      std::string piece = detok->push(next);
      r.text += piece;
      if (stream_text && !piece.empty()) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    }
    if (stop) {
      r.finish = "eos";
      break;
    }
    if (i + 1 == max_tokens) break;
    if (gen.length() + 1 > gen.max_context()) {
      r.finish = "context";
      break;
    }
    logits = gen.feed({next});
  }
  if (detok) {
    std::string tail = detok->flush();
    r.text += tail;
    if (stream_text) std::fwrite(tail.data(), 1, tail.size(), stdout);
  }
  return r;
}

void run_once(const RunArgs& a) {
  Session s = open(a, !a.prompt.empty());
  const ModelConfig& cfg = s.model->config();
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_ids(a.prompt_ids, cfg.vocab_size, "--prompt-ids");
  } else {
    prompt = s.tokenizer->encode(a.prompt, text::EncodeOptions{!a.no_special, true});
    if (prompt.empty()) fail("--prompt: the text encodes to no tokens");
    for (int32_t id : prompt)
      if (id >= cfg.vocab_size) fail("--prompt: token id {} from the tokenizer is outside the model's vocabulary ({})", id, cfg.vocab_size);
  }
  int64_t context = int64_t(prompt.size()) + a.max_tokens;
  if (context > cfg.max_position_embeddings)
    fail("--max-tokens: prompt ({}) + max tokens ({}) exceeds the model's context of {} tokens", prompt.size(),
         a.max_tokens, cfg.max_position_embeddings);
  SamplingOptions sampling = a.sampling;
  if (!a.seed_given) sampling.seed = std::random_device{}();
  Generator gen(*s.model, int32_t(context));
  TokenPicker picker(s.model->kernels(), sampling);
  const bool text_out = s.tokenizer && !a.print_ids;
  auto t1 = Clock::now();
  Tensor logits = gen.feed(prompt);
  s.model->kernels().synchronize();  // (the prompt's time: feed only queues it)
  auto t2 = Clock::now();
  TurnResult r = generate(s, gen, picker, logits, a.max_tokens, text_out);
  auto t3 = Clock::now();
  if (text_out) {
    std::printf("\n");
  } else {
    std::string line;
    for (size_t i = 0; i < r.ids.size(); ++i) line += (i ? " " : "") + std::to_string(r.ids[i]);
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
  double prefill_s = std::chrono::duration<double>(t2 - t1).count();
  double decode_s = std::chrono::duration<double>(t3 - t2).count();
  logger().info("prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s ({:.1f} tok/s); finish: {}",
                prompt.size(), prefill_s, double(prompt.size()) / prefill_s, r.ids.size(), decode_s,
                r.ids.size() > 1 ? double(r.ids.size() - 1) / decode_s : 0.0, r.finish);
}

void run_chat(const RunArgs& a) {
  Session s = open(a, true);
  const ModelConfig& cfg = s.model->config();
  text::ChatTemplate tmpl = text::ChatTemplate::load(s.dir);
  if (tmpl.empty()) fail("{}: the model has no chat template (tokenizer_config.json or chat_template.jinja)", s.dir.string());
  nlohmann::json kwargs;
  try {
    kwargs = nlohmann::json::parse(a.chat_kwargs);
  } catch (const nlohmann::json::exception& e) {
    fail("--chat-kwargs: not valid JSON: {}", e.what());
  }
  if (!kwargs.is_object()) fail("--chat-kwargs: must be a JSON object");
  int32_t context = a.max_context > 0 ? a.max_context : int32_t(std::min<int64_t>(cfg.max_position_embeddings, 8192));
  SamplingOptions sampling = a.sampling;
  if (!a.seed_given) sampling.seed = std::random_device{}();
  Generator gen(*s.model, context);
  TokenPicker picker(s.model->kernels(), sampling);
  nlohmann::json messages = nlohmann::json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  std::vector<int32_t> history;  // tokens whose KV the generator holds
  const bool tty = ::isatty(STDIN_FILENO);
  std::fprintf(stderr, "rill chat — %s (context %d tokens). Empty line or Ctrl-D ends.\n", s.dir.string().c_str(), context);
  for (;;) {
    if (tty) std::fprintf(stderr, "\n> ");
    std::string line;
    if (!std::getline(std::cin, line) || line.empty()) break;
    messages.push_back({{"role", "user"}, {"content", line}});
    std::string rendered = tmpl.render(messages, nullptr, true, kwargs);
    std::vector<int32_t> prompt = s.tokenizer->encode(rendered, text::EncodeOptions{false, true});
    if (int64_t(prompt.size()) + 1 > context) fail("the conversation ({} tokens) no longer fits the context of {} tokens", prompt.size(), context);
    // Reuse the KV of the longest common prefix with what the generator already holds.
    size_t common = 0;
    while (common < history.size() && common < prompt.size() && history[common] == prompt[common]) ++common;
    if (common == prompt.size()) --common;  // at least one token must be fed to get logits
    gen.truncate(int32_t(common));
    std::vector<int32_t> rest(prompt.begin() + long(common), prompt.end());
    Tensor logits = gen.feed(rest);
    int32_t budget = std::min<int32_t>(a.max_tokens, context - gen.length());
    TurnResult r = generate(s, gen, picker, logits, budget, true);
    std::printf("\n");
    std::fflush(stdout);
    history = prompt;
    history.insert(history.end(), r.ids.begin(), r.ids.end());
    if (r.finish != std::string("eos")) history.pop_back();  // the last sampled token was never fed
    messages.push_back({{"role", "assistant"}, {"content", r.text}});
    logger().debug("turn: prompt {} tokens ({} reused), generated {}, finish {}", prompt.size(), common, r.ids.size(), r.finish);
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, or chat interactively, with a model");
  cmd->add_option("--model,model", args->model, "Model directory (default: the built-in default model)");
  cmd->add_option("--prompt", args->prompt, "Prompt text (encoded with the model's tokenizer)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as token ids, e.g. 1,2,3");
  cmd->add_flag("--chat", args->chat, "Interactive multi-turn chat through the model's chat template");
  cmd->add_option("--system", args->system, "System message for --chat");
  cmd->add_option("--chat-kwargs", args->chat_kwargs, "Extra template variables for --chat, e.g. {\"enable_thinking\":false}");
  cmd->add_option("--max-tokens", args->max_tokens, "Most tokens to generate (per turn with --chat)")->capture_default_str();
  cmd->add_option("--max-context", args->max_context, "KV space in tokens for --chat (default: min(model, 8192))");
  cmd->add_option("--temperature", args->sampling.temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-p", args->sampling.top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "Keep the k most likely tokens (0 = all)")->capture_default_str();
  cmd->add_option("--seed", args->sampling.seed, "Random seed (default: random)")
      ->each([args](const std::string&) { args->seed_given = true; });
  cmd->add_flag("--print-ids", args->print_ids, "Print the generated token ids on one line instead of text");
  cmd->add_flag("--no-special", args->no_special, "Do not add BOS/EOS when encoding --prompt");
  cmd->add_option("--device", args->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Weight dtype on the device: auto (as stored), f32, bf16")->capture_default_str();
  cmd->callback([args] {
    validate(*args);
    if (args->chat) {
      run_chat(*args);
    } else {
      run_once(*args);
    }
  });
}

}  // namespace rill::cli
