// tests/server/metrics_test.cpp — Prometheus rendering: cumulative histogram buckets (counted by
// hand here), request counters by endpoint and status, engine gauges, TTFT and ITL histograms.
#include <gtest/gtest.h>

#include "server/metrics.h"

namespace rill::server {
namespace {

TEST(Histogram, CumulativeBuckets) {
  Histogram h({0.1, 1});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);
  EXPECT_EQ(h.render("x", "help"),
            "# HELP x help\n# TYPE x histogram\n"
            "x_bucket{le=\"0.1\"} 2\nx_bucket{le=\"1\"} 3\nx_bucket{le=\"+Inf\"} 4\nx_sum 3.65\nx_count 4\n");
}

TEST(ServerMetrics, RequestsAndEngineFigures) {
  ServerMetrics m;
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 400);
  EngineStats s;
  s.kv_blocks_total = 8;
  s.kv_blocks_used = 2;
  s.generated_tokens = 17;
  s.sessions_pinned = 3;
  s.session_blocks_pinned = 5;
  const std::string text = m.render(s);
  EXPECT_NE(text.find("rill_sessions_pinned 3\n"), std::string::npos);
  EXPECT_NE(text.find("rill_session_pinned_blocks 5\n"), std::string::npos);
  EXPECT_NE(text.find("rill_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("rill_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("rill_kv_cache_usage_ratio 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("rill_generation_tokens_total 17\n"), std::string::npos);
}

TEST(ServerMetrics, InterTokenLatencyHistogram) {
  ServerMetrics m;
  m.observe_ttft(0.2);
  for (double v : {0.003, 0.03, 0.03, 7.0}) m.observe_itl(v);
  const std::string text = m.render(EngineStats{});
  EXPECT_NE(text.find("# TYPE rill_inter_token_latency_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rill_inter_token_latency_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rill_inter_token_latency_seconds_bucket{le=\"0.04\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rill_inter_token_latency_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rill_inter_token_latency_seconds_count 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rill_time_to_first_token_seconds_count 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE rill_engine_inter_token_latency_seconds summary\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace rill::server
