// engine/metrics.cpp — see metrics.h.
#include "engine/metrics.h"

#include <algorithm>

#include <fmt/format.h>

namespace rill {

void LatencyWindow::add(double seconds) {
  samples_[next_] = seconds;
  next_ = (next_ + 1) % samples_.size();
  ++count_;
}

LatencySummary LatencyWindow::summary() const {
  LatencySummary s;
  s.count = count_;
  const size_t n = size_t(std::min<int64_t>(count_, int64_t(samples_.size())));
  if (n == 0) return s;
  std::vector<double> v(samples_.begin(), samples_.begin() + std::ptrdiff_t(n));
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean_s = sum / double(n);
  // Nearest-rank percentiles.
  auto rank = [&](double q) { return v[std::min(n - 1, size_t(std::max(0.0, q * double(n) - 1e-9)))]; };
  s.p50_s = rank(0.50);
  s.p99_s = rank(0.99);
  s.max_s = v.back();
  return s;
}

void LatencyWindow::clear() {
  next_ = 0;
  count_ = 0;
}

std::string activity_line(const EngineStats& before, const EngineStats& now, double seconds) {
  const double s = seconds > 0 ? seconds : 1.0;
  auto pct = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
  std::string line = fmt::format(
      "engine: {} running, {} waiting; prompt {:.1f} tok/s, generation {:.1f} tok/s; KV cache {:.1f}% used, "
      "{:.1f}% kept for prefixes",
      now.num_running, now.num_waiting, double(now.prompt_tokens - before.prompt_tokens) / s,
      double(now.generated_tokens - before.generated_tokens) / s, pct(now.kv_blocks_used, now.kv_blocks_total),
      pct(now.kv_blocks_cached, now.kv_blocks_total));
  const int64_t prompt = now.prompt_tokens - before.prompt_tokens;
  if (prompt > 0)
    line += fmt::format("; prefix cache hits {:.1f}% of prompt tokens",
                        pct(double(now.prefix_hit_tokens - before.prefix_hit_tokens), double(prompt)));
  if (const int64_t d = now.spec_drafted_tokens - before.spec_drafted_tokens; d > 0)
    line += fmt::format("; drafts accepted {:.1f}% ({} of {})",
                        pct(double(now.spec_accepted_tokens - before.spec_accepted_tokens), double(d)),
                        now.spec_accepted_tokens - before.spec_accepted_tokens, d);
  if (now.state_slots_total > 0) line += fmt::format("; state slots {}/{}", now.state_slots_used, now.state_slots_total);
  if (const int64_t p = now.num_preemptions - before.num_preemptions; p > 0) line += fmt::format("; {} preempted", p);
  return line;
}

}  // namespace rill
