// The Prometheus endpoint (--metrics_port) and the request metrics behind it: every line of
// the exposition parses (a comment, or `name{labels} value`), the counters match the requests
// sent, histograms are cumulative, and the endpoint stops with the server.
#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <regex>
#include <sstream>

#include "server/diag/request_metrics.h"
#include "tests/server/diagnostics_test_util.h"

namespace saturn::testing {
namespace {

// "name{labels}" -> value; fails the test on any line that is not valid exposition text.
std::map<std::string, double> ParseExposition(const std::string& text) {
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})? )"
      R"(([-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|[-+]Inf|NaN)$)");
  static const std::regex kComment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*$)");
  std::map<std::string, double> values;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    std::smatch m;
    if (line[0] == '#') {
      EXPECT_TRUE(std::regex_match(line, kComment)) << "line " << n << ": " << line;
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      ADD_FAILURE() << "line " << n << " does not parse: " << line;
      continue;
    }
    const std::string key = line.substr(0, line.rfind(' '));
    EXPECT_EQ(values.count(key), 0u) << "duplicate sample " << key;
    values[key] = std::stod(m[4].str() == "+Inf" ? "inf" : m[4].str());
  }
  return values;
}

TEST(HistogramTest, BucketsAreCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 3.0, 9.0}) h.Observe(v);
  std::string out;
  h.Render("x_seconds", "help", &out);
  const auto v = ParseExposition(out);
  EXPECT_EQ(v.at("x_seconds_bucket{le=\"1\"}"), 2);
  EXPECT_EQ(v.at("x_seconds_bucket{le=\"2\"}"), 3);
  EXPECT_EQ(v.at("x_seconds_bucket{le=\"5\"}"), 4);
  EXPECT_EQ(v.at("x_seconds_bucket{le=\"+Inf\"}"), 5);
  EXPECT_EQ(v.at("x_seconds_count"), 5);
  EXPECT_DOUBLE_EQ(v.at("x_seconds_sum"), 15.0);
  EXPECT_NE(out.find("# TYPE x_seconds histogram"), std::string::npos);
}

TEST(MetricsEndpointTest, ServesParseableTextWithCountersMatchingRequests) {
  ServerConfig config = DiagConfig();
  config.metrics_port = -1;  // any free port
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  const int port = s->app->metrics_port();
  ASSERT_GT(port, 0);

  constexpr int kRequests = 3, kPrompt = 6, kTokens = 5;
  for (const StreamResult& r : RunConcurrent(s->stub.get(), kRequests, kPrompt, kTokens)) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  }
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  const auto v = ParseExposition(res->body);

  EXPECT_EQ(v.at("saturn:request_success_total{finished_reason=\"length\"}"), kRequests);
  EXPECT_EQ(v.at("saturn:request_success_total{finished_reason=\"stop\"}"), 0);
  EXPECT_EQ(v.at("saturn:prompt_tokens_total"), kRequests * kPrompt);
  EXPECT_EQ(v.at("saturn:generation_tokens_total"), kRequests * kTokens);
  for (const char* h :
       {"saturn:time_to_first_token_seconds", "saturn:e2e_request_latency_seconds",
        "saturn:request_queue_time_seconds", "saturn:request_time_per_output_token_seconds"}) {
    EXPECT_EQ(v.at(std::string(h) + "_count"), kRequests) << h;
    EXPECT_EQ(v.at(std::string(h) + "_bucket{le=\"+Inf\"}"), kRequests) << h;
    EXPECT_GT(v.at(std::string(h) + "_sum"), 0) << h;
  }
  // One inter-token observation per token after each request's first.
  const double itl_n = kRequests * (kTokens - 1);
  EXPECT_EQ(v.at("saturn:inter_token_latency_seconds_count"), itl_n);
  EXPECT_EQ(v.at("saturn:inter_token_latency_seconds_bucket{le=\"+Inf\"}"), itl_n);
  EXPECT_GT(v.at("saturn:inter_token_latency_seconds_sum"), 0);
  // Per token and per request, the mean gaps agree: every request here has kTokens tokens.
  EXPECT_NEAR(v.at("saturn:inter_token_latency_seconds_sum") / itl_n,
              v.at("saturn:request_time_per_output_token_seconds_sum") / kRequests,
              1e-6 + 1e-3 * v.at("saturn:inter_token_latency_seconds_sum") / itl_n);
  EXPECT_GE(v.at("saturn:iteration_tokens_total_count"), kTokens);
  EXPECT_EQ(v.at("saturn:num_requests_running"), 0);
  EXPECT_EQ(v.at("saturn:num_requests_waiting"), 0);
  EXPECT_GE(v.at("saturn:kv_cache_usage_perc"), 0);
  EXPECT_LE(v.at("saturn:kv_cache_usage_perc"), 1);
  double classes = 0;
  for (const char* c :
       {"UNKNOWN", "UNDERLOADED", "LAUNCH_BOUND", "MEMORY_BOUND", "COMPUTE_BOUND", "HOST_BOUND"}) {
    classes += v.at(std::string("saturn:bottleneck_class{class=\"") + c + "\"}");
  }
  EXPECT_EQ(classes, 1);
  for (const char* g : {"saturn:mfu", "saturn:mbu", "saturn:busy_fraction"}) {
    EXPECT_GE(v.at(g), 0) << g;
  }
  EXPECT_GT(v.at("saturn:cpu_run_share"), 0);
  EXPECT_LE(v.at("saturn:cpu_run_share"), 1);
  EXPECT_GT(v.at("saturn:calibrated_gemm_flops"), 0);
  EXPECT_GT(v.at("saturn:calibrated_bandwidth_bytes"), 0);
  EXPECT_GE(v.at("saturn:calibration_age_seconds"), 0);
  EXPECT_TRUE(v.count("saturn:calibration_suspect"));
  EXPECT_TRUE(v.count("saturn:calibration_stable"));

  s->app->Shutdown();
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(5, 0);
  EXPECT_FALSE(after.Get("/metrics"));  // the endpoint stopped with the server
}

TEST(MetricsEndpointTest, OffByDefault) {
  auto s = StartServer(DiagConfig());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->app->metrics_port(), 0);
}

}  // namespace
}  // namespace saturn::testing
