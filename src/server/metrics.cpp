// server/metrics.cpp — Prometheus text rendering.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace rill::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard lock(mutex_);
  size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard lock(mutex_);
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5}) {}

void ServerMetrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

namespace {
void gauge(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}
void summary(std::string& out, const char* name, const char* help, const LatencySummary& s) {
  out += fmt::format("# HELP {} {}\n# TYPE {} summary\n", name, help, name);
  out += fmt::format("{}{{quantile=\"0.5\"}} {}\n{}{{quantile=\"0.99\"}} {}\n", name, s.p50_s, name, s.p99_s);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, s.mean_s * double(s.count), name, s.count);
}
}  // namespace

std::string ServerMetrics::render(const EngineStats& s) const {
  std::string out = "# HELP rill_requests_total HTTP requests by endpoint and status.\n# TYPE rill_requests_total counter\n";
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, n] : requests_)
      out += fmt::format("rill_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  }
  gauge(out, "rill_prompt_tokens_total", "counter", "Prompt tokens admitted.", double(s.prompt_tokens));
  gauge(out, "rill_generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  gauge(out, "rill_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
        double(s.prefix_hit_tokens));
  gauge(out, "rill_num_requests_waiting", "gauge", "Requests queued.", s.num_waiting);
  gauge(out, "rill_num_requests_running", "gauge", "Sequences holding KV.", s.num_running);
  gauge(out, "rill_kv_cache_blocks_total", "gauge", "KV cache blocks.", s.kv_blocks_total);
  gauge(out, "rill_kv_cache_blocks_used", "gauge", "KV cache blocks held by live sequences.", s.kv_blocks_used);
  gauge(out, "rill_kv_cache_usage_ratio", "gauge", "Share of KV blocks in use.",
        s.kv_blocks_total ? double(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  gauge(out, "rill_requests_finished_total", "counter", "Requests finished by the engine.", double(s.requests_finished));
  gauge(out, "rill_requests_cancelled_total", "counter", "Requests cancelled.", double(s.requests_cancelled));
  gauge(out, "rill_num_preemptions_total", "counter", "Sequences preempted.", double(s.num_preemptions));
  gauge(out, "rill_engine_steps_total", "counter", "Engine steps run.", double(s.num_steps));
  gauge(out, "rill_engine_steps_overlapped_total", "counter",
        "Engine steps launched before the previous step's token ids were read.", double(s.steps_overlapped));
  gauge(out, "rill_spec_verify_rows_total", "counter", "Rows that verified speculative drafts.",
        double(s.spec_verify_rows));
  gauge(out, "rill_spec_draft_tokens_total", "counter", "Speculative draft tokens verified.",
        double(s.spec_drafted_tokens));
  gauge(out, "rill_spec_accepted_tokens_total", "counter", "Speculative draft tokens accepted (kept as output).",
        double(s.spec_accepted_tokens));
  gauge(out, "rill_sessions_pinned", "gauge", "Sessions whose last prompt boundary is pinned in the prefix cache.",
        s.sessions_pinned);
  gauge(out, "rill_session_pinned_blocks", "gauge", "KV cache blocks pinned by sessions (counted in blocks_used).",
        s.session_blocks_pinned);
  gauge(out, "rill_state_snapshot_bytes", "gauge", "Device memory of hybrid models' prefix-cache state snapshots.",
        double(s.state_snapshot_bytes));
  out += ttft_.render("rill_time_to_first_token_seconds", "Submit to first token, per request.");
  out += itl_.render("rill_inter_token_latency_seconds",
                     "Time between consecutive tokens of a sequence, per generated token after the first.");
  summary(out, "rill_engine_time_to_first_token_seconds", "Engine TTFT over its recent window.", s.ttft);
  summary(out, "rill_engine_inter_token_latency_seconds", "Engine inter-token time over its recent window.", s.itl);
  return out;
}

}  // namespace rill::server
