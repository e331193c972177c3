// engine/metrics.cpp — see metrics.h.
#include "engine/metrics.h"

#include <algorithm>

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

}  // namespace rill
