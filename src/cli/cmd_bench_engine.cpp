// cli/cmd_bench_engine.cpp — `rill bench-serve`: throughput and latency of the serving engine.
// `concurrency` closed-loop clients each submit a request (random prompt of `prompt-len` tokens,
// the first `shared-prefix` of them common to all requests, `max-tokens` generated, no stop
// tokens), wait for its last token and submit the next, until `num-requests` are done. Prints
// output tokens/s, TTFT p50/p99 (client-side, submit → first token), inter-token time p50/p99
// (client-side, this cell's requests) and the engine's cache figures, one line each, after a
// progress line on stderr.
// `--scenario multiturn`: one conversation of `context` prompt tokens (plus `max-tokens` generated)
// is run cold, then a request extending it by `extend` new tokens (prompt + generated + new text,
// as the next turn of a chat); prints both TTFTs and how many tokens the extension prefilled (the
// rest came from the prefix cache: KV blocks and, for hybrid models, state snapshots).
// `--cells C:P:M[:F],...` runs several throughput cells (concurrency, prompt, max tokens, shared
// prefix fraction) one after another on one loaded model, each with its own prompts.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model.h"

namespace rill::cli {
namespace {

struct BenchServeArgs {
  std::string model, device = "auto";
  int32_t concurrency = 16, num_requests = 0, prompt_len = 512, max_tokens = 128;
  double shared_prefix = 0.0, temperature = 0.0;
  size_t kv_memory = 0;
  int32_t max_batched_tokens = 4096, max_num_seqs = 0;
  uint64_t seed = 1;
  bool no_prefix_cache = false, sync_steps = false;
  std::string scenario = "throughput";
  int32_t context = 50000, extend = 200;
  int32_t snapshot_interval = 0;
  size_t state_snapshot_memory = 0;
  std::vector<std::string> cells;
  SpeculativeArgs speculative;
};

// One throughput measurement.
struct Cell {
  int32_t concurrency = 16, num_requests = 0, prompt_len = 512, max_tokens = 128;
  double shared_prefix = 0.0;
};

Cell parse_cell(const std::string& text) {
  Cell c;
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ':') {
      parts.push_back(text.substr(begin, i - begin));
      begin = i + 1;
    }
  if (parts.size() < 3 || parts.size() > 4) fail("--cells: '{}' must be CONCURRENCY:PROMPT:MAX_TOKENS[:SHARED]", text);
  try {
    c.concurrency = std::stoi(parts[0]);
    c.prompt_len = std::stoi(parts[1]);
    c.max_tokens = std::stoi(parts[2]);
    if (parts.size() == 4) c.shared_prefix = std::stod(parts[3]);
  } catch (const std::exception&) {
    fail("--cells: '{}' must be CONCURRENCY:PROMPT:MAX_TOKENS[:SHARED] with numbers", text);
  }
  return c;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(std::max(0.0, q * double(v.size()) - 1e-9)))];
}

// Submits `r`, waits for its end; returns the client-side TTFT and the generated tokens.
std::pair<double, std::vector<int32_t>> run_one(Engine& engine, const Request& r, int32_t& cached) {
  const auto start = std::chrono::steady_clock::now();
  Submission s = engine.submit(r);
  if (!s.ok()) fail("request refused: {}", s.message);
  double ttft = 0;
  std::vector<int32_t> tokens;
  while (std::optional<TokenEvent> e = s.handle->next()) {
    if (!e->error.empty()) fail("request failed: {}", e->error);
    if (e->token >= 0) {
      if (tokens.empty()) ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      tokens.push_back(e->token);
    }
    cached = e->cached_tokens;
    if (e->request_done) break;
  }
  return {ttft, tokens};
}

void bench_multiturn(const BenchServeArgs& a, Engine& engine, int64_t vocab, bool cuda) {
  if (a.context < 1 || a.extend < 1) fail("--context and --extend: must be >= 1, got {} and {}", a.context, a.extend);
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
  auto tokens = [&](int32_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& t : v) t = token(rng);
    return v;
  };
  Request r;
  r.sampling.temperature = float(a.temperature);
  r.sampling.seed = a.seed;
  // Warm-up on unrelated tokens (kernel selection, arena growth).
  r.prompt = tokens(std::min(a.context, 256));
  r.max_tokens = 2;
  int32_t cached = 0;
  run_one(engine, r, cached);
  r.prompt = tokens(a.context);
  r.max_tokens = a.max_tokens;
  const EngineStats s0 = engine.stats();
  auto [ttft1, out1] = run_one(engine, r, cached);
  const EngineStats s1 = engine.stats();
  r.prompt.insert(r.prompt.end(), out1.begin(), out1.end());
  const std::vector<int32_t> more = tokens(a.extend);
  r.prompt.insert(r.prompt.end(), more.begin(), more.end());
  r.max_tokens = 1;
  int32_t cached2 = 0;
  auto [ttft2, out2] = run_one(engine, r, cached2);
  const EngineStats s2 = engine.stats();
  std::printf("device %s scenario multiturn context %d generated %zu extend %d\n", cuda ? "cuda" : "cpu", a.context,
              out1.size(), a.extend);
  std::printf("turn1_ttft_ms %.1f (cold, %d prompt tokens)\n", 1e3 * ttft1, a.context);
  std::printf("turn2_ttft_ms %.1f (%zu prompt tokens)\n", 1e3 * ttft2, r.prompt.size());
  std::printf("turn2_cached_tokens %d\nturn2_prefilled_tokens %lld\n", cached2,
              (long long)(s2.computed_tokens - s1.computed_tokens));
  std::printf("turn1_computed_tokens %lld\n", (long long)(s1.computed_tokens - s0.computed_tokens));
  std::printf("state_snapshots %d bytes %lld budget %lld saved %lld evicted %lld\n", s2.state_snapshots,
              (long long)s2.state_snapshot_bytes, (long long)s2.state_snapshot_budget_bytes,
              (long long)s2.state_snapshots_saved, (long long)s2.state_snapshots_evicted);
}

void check_cell(const Cell& c) {
  if (c.concurrency < 1) fail("--concurrency: must be >= 1, got {}", c.concurrency);
  if (c.prompt_len < 1) fail("--prompt-len: must be >= 1, got {}", c.prompt_len);
  if (c.max_tokens < 1) fail("--max-tokens: must be >= 1, got {}", c.max_tokens);
  if (c.shared_prefix < 0 || c.shared_prefix > 1) fail("--shared-prefix: must be in [0, 1], got {}", c.shared_prefix);
}

void run_cell(const BenchServeArgs& a, const Cell& cell, uint64_t seed, Engine& engine, int64_t vocab, bool cuda) {
  const int32_t total = cell.num_requests > 0 ? cell.num_requests : cell.concurrency;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
  const int32_t shared = int32_t(cell.shared_prefix * cell.prompt_len);
  std::vector<int32_t> prefix(static_cast<size_t>(shared));
  for (int32_t& t : prefix) t = token(rng);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(total));
  for (auto& p : prompts) {
    p = prefix;
    while (int32_t(p.size()) < cell.prompt_len) p.push_back(token(rng));
  }
  auto request = [&](const std::vector<int32_t>& prompt, int32_t max_tokens) {
    Request r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = float(a.temperature);
    r.sampling.seed = seed;
    return r;
  };
  const EngineStats before = engine.stats();
  std::atomic<int32_t> next{0}, done{0};
  std::atomic<int64_t> generated{0};
  std::vector<double> ttft(static_cast<size_t>(total), 0.0);
  std::vector<double> itl;  // client-side gaps between a request's tokens, this cell only
  std::vector<std::string> errors;
  std::mutex errors_mutex;
  const auto t0 = std::chrono::steady_clock::now();
  auto t_end = t0;  // when the last request ended (under errors_mutex): the cell's wall time
  std::vector<std::thread> clients;
  for (int32_t c = 0; c < std::min(cell.concurrency, total); ++c)
    clients.emplace_back([&] {
      for (int32_t i; (i = next.fetch_add(1)) < total;) {
        const auto start = std::chrono::steady_clock::now();
        Submission s = engine.submit(request(prompts[size_t(i)], cell.max_tokens));
        if (!s.ok()) {
          std::lock_guard lock(errors_mutex);
          errors.push_back(s.message);
          done.fetch_add(1);
          continue;
        }
        bool first = true;
        std::vector<double> gaps;
        auto last = start;
        while (std::optional<TokenEvent> e = s.handle->next()) {
          if (e->token >= 0) {
            const auto now = std::chrono::steady_clock::now();
            if (first) ttft[size_t(i)] = std::chrono::duration<double>(now - start).count();
            else gaps.push_back(std::chrono::duration<double>(now - last).count());
            last = now;
            first = false;
          }
          if (e->token >= 0) generated.fetch_add(1);
          if (!e->error.empty()) {
            std::lock_guard lock(errors_mutex);
            errors.push_back(e->error);
          }
          if (e->request_done) break;
        }
        {
          std::lock_guard lock(errors_mutex);
          itl.insert(itl.end(), gaps.begin(), gaps.end());
          t_end = std::max(t_end, std::chrono::steady_clock::now());
        }
        done.fetch_add(1);
      }
    });
  Progress progress("bench-serve");
  while (done.load() < total) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    progress.update(done.load(), total, fmt::format("requests, {} tokens", generated.load()));
  }
  for (auto& t : clients) t.join();
  // Not the progress loop's wake-up, which would round the cell up to its 200 ms period.
  const double elapsed = std::chrono::duration<double>(t_end - t0).count();
  progress.finish();
  if (!errors.empty()) fail("{} requests failed; first: {}", errors.size(), errors.front());
  const EngineStats s = engine.stats();
  std::printf("device %s concurrency %d requests %d prompt %d max_tokens %d shared_prefix %.2f\n", cuda ? "cuda" : "cpu",
              cell.concurrency, total, cell.prompt_len, cell.max_tokens, cell.shared_prefix);
  std::printf("elapsed_s %.3f\n", elapsed);
  std::printf("output_tokens_per_s %.1f\n", double(generated.load()) / elapsed);
  std::printf("total_tokens_per_s %.1f (prompt + output)\n",
              (double(generated.load()) + double(total) * cell.prompt_len) / elapsed);
  std::printf("ttft_p50_ms %.1f\nttft_p99_ms %.1f\n", 1e3 * percentile(ttft, 0.5), 1e3 * percentile(ttft, 0.99));
  // Inter-token latency as the clients saw it in this cell (not the engine's rolling window,
  // which spans the cells run before).
  std::printf("itl_p50_ms %.2f\nitl_p99_ms %.2f\n", 1e3 * percentile(itl, 0.5), 1e3 * percentile(itl, 0.99));
  std::printf("prefix_hit_tokens %lld of %lld prompt tokens\n", (long long)(s.prefix_hit_tokens - before.prefix_hit_tokens),
              (long long)(s.prompt_tokens - before.prompt_tokens));
  std::printf("preemptions %lld steps %lld (%lld overlapped) kv_blocks %d\n",
              (long long)(s.num_preemptions - before.num_preemptions), (long long)(s.num_steps - before.num_steps),
              (long long)(s.steps_overlapped - before.steps_overlapped), s.kv_blocks_total);
  if (const int64_t drafted = s.spec_drafted_tokens - before.spec_drafted_tokens; drafted > 0)
    std::printf("speculative_rows %lld drafted %lld accepted %lld (%.1f%%)\n",
                (long long)(s.spec_verify_rows - before.spec_verify_rows), (long long)drafted,
                (long long)(s.spec_accepted_tokens - before.spec_accepted_tokens),
                100.0 * double(s.spec_accepted_tokens - before.spec_accepted_tokens) / double(drafted));
  std::fflush(stdout);
}

void bench_serve(const BenchServeArgs& a) {
  if (a.scenario != "throughput" && a.scenario != "multiturn")
    fail("--scenario: must be throughput or multiturn, got '{}'", a.scenario);
  std::vector<Cell> cells;
  for (const std::string& c : a.cells) cells.push_back(parse_cell(c));
  if (cells.empty())
    cells.push_back(Cell{a.concurrency, a.num_requests, a.prompt_len, a.max_tokens, a.shared_prefix});
  int32_t max_concurrency = 1;
  for (const Cell& c : cells) {
    check_cell(c);
    max_concurrency = std::max(max_concurrency, c.concurrency);
  }
  EngineOptions o;
  apply_speculative_options(a.speculative, o);  // checked before loading, as the cells above
  std::filesystem::path dir = resolve_model_dir(a.model);
  auto kernels = make_kernels(a.device);
  const bool cuda = kernels->device() == Device::cuda;
  auto model = load_model(dir, *kernels, LoadOptions{std::nullopt, true});
  const int64_t vocab = model->config().vocab_size;
  o.kv_memory_bytes = a.kv_memory;
  o.max_num_batched_tokens = a.max_batched_tokens;
  o.max_num_seqs = a.max_num_seqs > 0 ? a.max_num_seqs : max_concurrency;
  o.max_waiting = std::max(1024, max_concurrency * 2);
  o.prefix_caching = !a.no_prefix_cache;
  if (a.sync_steps) o.overlap_steps = EngineOptions::Overlap::off;
  o.snapshot_interval_blocks = a.snapshot_interval;
  o.state_snapshot_bytes = a.state_snapshot_memory;
  Engine engine(std::move(kernels), std::move(model), o);
  if (a.scenario == "multiturn") return bench_multiturn(a, engine, vocab, cuda);

  // Warm-up (kernel selection, arena growth, step graphs) on a prompt unrelated to the measured ones.
  {
    std::vector<int32_t> warm(static_cast<size_t>(std::min(a.prompt_len, 64)), 1);
    Request r;
    r.prompt = warm;
    r.max_tokens = 4;
    Submission s = engine.submit(r);
    if (!s.ok()) fail("warm-up request refused: {}", s.message);
    collect(*s.handle);
  }
  for (size_t i = 0; i < cells.size(); ++i) run_cell(a, cells[i], a.seed + 1000 * i, engine, vocab, cuda);
}

}  // namespace

void add_bench_serve_command(CLI::App& app) {
  auto args = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = app.add_subcommand("bench-serve", "Measure the serving engine: output tokens/s and TTFT under load");
  cmd->add_option("--model,model", args->model, "Model directory (default: the built-in default model)");
  cmd->add_option("--device", args->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--concurrency", args->concurrency, "Requests in flight")->capture_default_str();
  cmd->add_option("--num-requests", args->num_requests, "Requests in total (default: --concurrency)");
  cmd->add_option("--prompt-len", args->prompt_len, "Prompt tokens per request")->capture_default_str();
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens generated per request")->capture_default_str();
  cmd->add_option("--shared-prefix", args->shared_prefix, "Fraction of the prompt common to all requests")
      ->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--kv-memory", args->kv_memory, "KV cache bytes (0: automatic)")->capture_default_str();
  cmd->add_option("--max-batched-tokens", args->max_batched_tokens, "New tokens per engine step")->capture_default_str();
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "Rows per step (default: --concurrency)");
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache, "Disable prefix caching");
  add_speculative_options(*cmd, args->speculative);
  cmd->add_flag("--sync-steps", args->sync_steps,
                "Read each step's token ids before scheduling the next (default on a GPU: launch the next decode "
                "step first, its ids fed on the device)");
  cmd->add_option("--seed", args->seed, "Prompt and sampling seed")->capture_default_str();
  cmd->add_option("--scenario", args->scenario, "throughput (closed-loop clients) or multiturn (cached-turn TTFT)")
      ->capture_default_str();
  cmd->add_option("--context", args->context, "multiturn: tokens of the conversation so far")->capture_default_str();
  cmd->add_option("--extend", args->extend, "multiturn: new tokens of the next turn")->capture_default_str();
  cmd->add_option("--snapshot-interval", args->snapshot_interval,
                  "Hybrid models: state snapshot every this many KV blocks (0: max-batched-tokens / block size)");
  cmd->add_option("--cells", args->cells,
                  "Several throughput cells on one loaded model: CONCURRENCY:PROMPT:MAX_TOKENS[:SHARED],...")
      ->delimiter(',');
  cmd->add_option("--state-snapshot-memory", args->state_snapshot_memory,
                  "Hybrid models: bytes for prefix-cache state snapshots (0: 10% of the KV budget)");
  cmd->callback([args] { bench_serve(*args); });
}

}  // namespace rill::cli
