// server/metrics.h — what /metrics exposes (Prometheus text format 0.0.4): requests by endpoint
// and status, time-to-first-token and inter-token-latency histograms (counted by the server, per
// request and per generated token after a sequence's first), plus the engine's
// figures (queue depth, running rows, KV usage, token and prefix-hit counters, TTFT and
// inter-token latency summaries over the engine's recent window).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/metrics.h"

namespace rill::server {

/// A cumulative histogram with fixed upper bounds (seconds). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  /// The _bucket/_sum/_count lines of metric `name`.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative), plus +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  void count_request(const std::string& endpoint, int status);
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_itl(double seconds) { itl_.observe(seconds); }
  std::string render(const EngineStats& stats) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  Histogram ttft_, itl_;
};

}  // namespace rill::server
