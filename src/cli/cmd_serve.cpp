// cli/cmd_serve.cpp — `rill serve`: loads a model, starts the engine on its own thread and serves
// the OpenAI- and Anthropic-compatible HTTP API (server/) until SIGINT/SIGTERM, then answers new work
// with 503 while running requests finish, and exits 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/service.h"
#include "text/tool_calls.h"

namespace rill::cli {
namespace {

struct ServeArgs {
  std::string model, device = "auto", host = "127.0.0.1", api_key, served_name, reasoning_parser, tool_parser = "auto";
  int port = 8080, threads = 2, max_num_seqs = 256, max_waiting = 1024, max_model_len = 0;
  size_t kv_memory = 0, max_body = 8 << 20;
  int max_batched_tokens = 2048, max_state_slots = 0, max_sessions = 64;
  double session_pinned_fraction = 0.5, log_stats_interval = 10;
  size_t state_snapshot_memory = 0;
  bool no_prefix_cache = false, no_cuda_graphs = false, sync_steps = false;
  std::string batch_invariant;  // empty: the backend default (on; RILL_BATCH_INVARIANT=0 turns it off)
  SpeculativeArgs speculative;
};

void serve(const ServeArgs& a) {
  namespace fs = std::filesystem;
  if (a.port < 0 || a.port > 65535) fail("--port: must be in [0, 65535], got {}", a.port);
  if (a.threads < 1) fail("--threads: must be >= 1, got {}", a.threads);
  if (a.tool_parser != "auto") text::tool_format_from_name(a.tool_parser, "--tool-parser");  // checked before loading
  if (!a.batch_invariant.empty() && a.batch_invariant != "on" && a.batch_invariant != "off")
    fail("--batch-invariant: must be on or off, got '{}'", a.batch_invariant);
  if (a.max_batched_tokens < 1) fail("--max-batched-tokens: must be >= 1, got {}", a.max_batched_tokens);
  if (a.max_state_slots < 0) fail("--max-state-slots: must be >= 0, got {}", a.max_state_slots);
  if (a.max_sessions < 0) fail("--max-sessions: must be >= 0, got {}", a.max_sessions);
  if (!(a.session_pinned_fraction >= 0 && a.session_pinned_fraction <= 1))
    fail("--session-pinned-fraction: must be in [0, 1], got {}", a.session_pinned_fraction);
  if (a.max_waiting < 1) fail("--max-waiting: must be >= 1, got {}", a.max_waiting);
  if (!(a.log_stats_interval >= 0) || !std::isfinite(a.log_stats_interval))
    fail("--log-stats-interval: must be a number of seconds >= 0 (0: off), got {}", a.log_stats_interval);
  if (!a.reasoning_parser.empty() && a.reasoning_parser != "qwen3" && a.reasoning_parser != "deepseek_r1")
    fail("--reasoning-parser: '{}' is not known (qwen3, deepseek_r1)", a.reasoning_parser);
  EngineOptions eo;
  apply_speculative_options(a.speculative, eo);  // checked before loading, as the flags above
  const auto t0 = std::chrono::steady_clock::now();
  // The address is taken before the model loads: a port in use is an error at once, not after a load of
  // minutes, and nothing else can take the port meanwhile. Connections made during the load wait in the
  // listen backlog: the handler runs only once http->run() starts, after the service exists.
  std::unique_ptr<server::Service> service;
  server::HttpOptions ho;
  ho.host = a.host;
  ho.port = uint16_t(a.port);
  ho.threads = a.threads;
  ho.body_limit = a.max_body;
  auto http = std::make_unique<server::HttpServer>(
      ho,
      [&](const server::HttpRequest& r) { return service->handle(r); },
      [](int status, const std::string& message, const std::string& target) {
        return server::Service::error_reply_for(target, status, message);
      });
  logger().info("rill serve: listening on {}:{}; loading the model", a.host, http->port());
  fs::path dir = resolve_model_dir(a.model);
  std::optional<text::Tokenizer> tokenizer;
  if (fs::exists(dir / "tokenizer.json")) tokenizer = text::Tokenizer::load(dir);
  text::ChatTemplate chat_template = text::ChatTemplate::load(dir);
  auto kernels = make_kernels(a.device);
  if (!a.batch_invariant.empty()) kernels->set_batch_invariant(a.batch_invariant == "on");
  logger().info("rill serve: batch-invariant kernels {}", kernels->batch_invariant() ? "on" : "off");
  LoadOptions load;
  load.cuda_graphs = !a.no_cuda_graphs;
  auto model = load_model(dir, *kernels, load);
  std::vector<int32_t> stop_ids = model->config().eos_token_ids;
  if (tokenizer && tokenizer->eos_id() && std::find(stop_ids.begin(), stop_ids.end(), *tokenizer->eos_id()) == stop_ids.end())
    stop_ids.push_back(*tokenizer->eos_id());
  eo.kv_memory_bytes = a.kv_memory;
  eo.max_num_seqs = a.max_num_seqs;
  eo.max_waiting = a.max_waiting;
  eo.max_model_len = a.max_model_len;
  eo.max_num_batched_tokens = a.max_batched_tokens;
  eo.prefix_caching = !a.no_prefix_cache;
  if (a.sync_steps) eo.overlap_steps = EngineOptions::Overlap::off;
  eo.max_state_slots = a.max_state_slots;
  eo.state_snapshot_bytes = a.state_snapshot_memory;
  eo.max_sessions = a.max_sessions;
  eo.session_pinned_fraction = a.session_pinned_fraction;
  eo.log_stats_interval_s = a.log_stats_interval;
  Engine engine(std::move(kernels), std::move(model), eo);
  server::ServiceOptions so;
  so.model_id = a.served_name.empty() ? (a.model.empty() ? "default" : fs::path(a.model).lexically_normal().filename().string())
                                      : a.served_name;
  if (so.model_id.empty()) so.model_id = fs::path(a.model).lexically_normal().parent_path().filename().string();
  so.api_key = a.api_key;
  so.reasoning = !a.reasoning_parser.empty();
  if (a.tool_parser != "auto") so.tool_parser = a.tool_parser;
  server::EngineAdapter engine_api(engine);
  service = std::make_unique<server::Service>(engine_api, std::move(tokenizer), std::move(chat_template), stop_ids, so);
  // However this function ends, the server's connections and jobs go before the service and the engine they use.
  struct CloseFirst {
    std::unique_ptr<server::HttpServer>& http;
    ~CloseFirst() { http.reset(); }
  } close_first{http};
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  logger().info("rill serve: model '{}' from {} loaded in {:.2f} s (max_model_len {})", so.model_id, dir.string(), load_s,
                engine.max_model_len());
  logger().info("rill serve: tool calls parsed as {}", text::tool_format_name(service->tool_format()));
  logger().info("rill serve: ready on http://{}:{}", a.host, http->port());
  http->run(10.0, [&] { service->drain(); });
  logger().info("rill serve: stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over OpenAI- and Anthropic-compatible HTTP APIs");
  cmd->add_option("--model,model", args->model, "Model directory (default: the built-in default model)");
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "Require this key (Authorization: Bearer or x-api-key)");
  cmd->add_option("--served-model-name", args->served_name, "Model id reported by /v1/models (default: the directory name)");
  cmd->add_option("--reasoning-parser", args->reasoning_parser,
                  "Split <think> output into reasoning_content (OpenAI) and thinking blocks (Anthropic): qwen3 or "
                  "deepseek_r1 (default: off)");
  cmd->add_option("--tool-parser", args->tool_parser,
                  "Tool-call format of the model's output: qwen3 (<tool_call> JSON), llama3 (JSON objects), none "
                  "(tool calls stay text), or auto (from the chat template)")
      ->capture_default_str();
  cmd->add_option("--device", args->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--threads", args->threads, "HTTP I/O threads")->capture_default_str();
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "Rows per engine step")->capture_default_str();
  cmd->add_option("--max-waiting", args->max_waiting, "Queued requests before new ones get 429")->capture_default_str();
  cmd->add_option("--max-model-len", args->max_model_len, "Context length (0: the model's)")->capture_default_str();
  cmd->add_option("--kv-memory", args->kv_memory, "KV cache bytes (0: automatic)")->capture_default_str();
  cmd->add_option("--max-body-bytes", args->max_body, "Largest request body accepted (413 above)")->capture_default_str();
  cmd->add_option("--max-batched-tokens", args->max_batched_tokens, "New tokens per engine step (prefill chunk budget)")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache, "Disable prefix caching");
  add_speculative_options(*cmd, args->speculative);
  cmd->add_flag("--sync-steps", args->sync_steps,
                "Read each step's token ids before scheduling the next (default on a GPU: launch the next decode "
                "step first, its ids fed on the device; on the CPU steps are always read first)");
  cmd->add_option("--max-sessions", args->max_sessions,
                  "Sessions (request session_id) whose last prompt stays pinned in the cache; 0: none")
      ->capture_default_str();
  cmd->add_option("--session-pinned-fraction", args->session_pinned_fraction,
                  "Share of the KV cache session pins may hold")
      ->capture_default_str();
  cmd->add_option("--max-state-slots", args->max_state_slots,
                  "Hybrid models: sequences with recurrent state at once (0: --max-num-seqs)")
      ->capture_default_str();
  cmd->add_option("--state-snapshot-memory", args->state_snapshot_memory,
                  "Hybrid models: bytes for prefix-cache state snapshots (0: 10% of the KV budget)")
      ->capture_default_str();
  cmd->add_option("--batch-invariant", args->batch_invariant,
                  "on: a request's tokens do not depend on the other requests in its step (CUDA: our GEMM); "
                  "off: the autotuned cuBLASLt/matvec path, faster (default on)");
  cmd->add_flag("--no-cuda-graphs", args->no_cuda_graphs, "Decode without CUDA step graphs");
  cmd->add_option("--log-stats-interval", args->log_stats_interval,
                  "Seconds between the engine's activity lines while there is work (rows running and waiting, "
                  "tokens/s, KV cache use, prefix hits); 0: off")
      ->capture_default_str();
  cmd->callback([args] { serve(*args); });
}

}  // namespace rill::cli
