// Percentiles, throughput, goodput, warm-up exclusion and the stability check, from
// recorded timings with answers worked out by hand (numpy's percentile as the reference).
#include "clients/common/stats.h"

#include <gtest/gtest.h>

namespace saturn::clients {
namespace {

TEST(PercentileTest, LinearInterpolationLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [0, 50, 90, 99, 100]) = [1, 2.5, 3.7, 3.97, 4]
  const std::vector<double> v = {4, 1, 3, 2};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_NEAR(Percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(Percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  // numpy.percentile(range(1, 101), 99) = 99.01
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(Percentile(hundred, 99), 99.01, 1e-9);
  EXPECT_NEAR(Percentile(hundred, 90), 90.1, 1e-9);
}

TEST(PercentileTest, SummaryHoldsMeanAndExtremes) {
  const Summary s = Summarize({10, 20, 30, 40, 50});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 30);
  EXPECT_DOUBLE_EQ(s.p50, 30);
  EXPECT_DOUBLE_EQ(s.p90, 46);
  EXPECT_DOUBLE_EQ(s.min, 10);
  EXPECT_DOUBLE_EQ(s.max, 50);
  EXPECT_EQ(Summarize({}).count, 0);
}

RequestRecord Ok(int64_t index, double send, std::vector<double> times, std::vector<int> counts,
                 double final_s, int prompt_tokens = 10) {
  RequestRecord r;
  r.index = index;
  r.send_s = send;
  r.token_times_s = std::move(times);
  r.token_counts = std::move(counts);
  for (int c : r.token_counts) r.output_tokens += c;
  r.has_final = true;
  r.final_s = final_s;
  r.end_s = final_s;
  r.prompt_tokens = prompt_tokens;
  r.server_queue_ms = 1.5;
  return r;
}

// r0: TTFT 100, TPOT 100, ITL 100 100, E2E 350 (ms)
// r1: TTFT 50, TPOT 50, ITL 50, E2E 200
// r2: RESOURCE_EXHAUSTED
// r3: TTFT 300, 4 tokens in 2 messages: TPOT 100/3, ITL 100, E2E 500
std::vector<RequestRecord> Known() {
  std::vector<RequestRecord> v;
  v.push_back(Ok(0, 0.0, {0.1, 0.2, 0.3}, {1, 1, 1}, 0.35));
  v.push_back(Ok(1, 0.5, {0.55, 0.6}, {1, 1}, 0.7));
  RequestRecord err;
  err.index = 2;
  err.send_s = 0.6;
  err.end_s = 0.61;
  err.status = "RESOURCE_EXHAUSTED";
  v.push_back(err);
  v.push_back(Ok(3, 1.0, {1.3, 1.4}, {2, 2}, 1.5));
  return v;
}

TEST(ComputeMetricsTest, KnownAnswers) {
  const RunMetrics m = ComputeMetrics(Known(), MetricsOptions());
  EXPECT_EQ(m.sent, 4);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.errors, 1);
  EXPECT_EQ(m.errors_by_code.at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(m.measured, 3);
  EXPECT_EQ(m.warmup_excluded, 0);
  EXPECT_DOUBLE_EQ(m.run_duration_s, 1.5);
  EXPECT_DOUBLE_EQ(m.window_s, 1.5);
  EXPECT_DOUBLE_EQ(m.request_throughput, 2.0);
  EXPECT_EQ(m.output_tokens, 9);
  EXPECT_DOUBLE_EQ(m.output_token_throughput, 6.0);
  EXPECT_DOUBLE_EQ(m.input_token_throughput, 20.0);
  EXPECT_NEAR(m.ttft_ms.mean, 150, 1e-9);
  EXPECT_NEAR(m.ttft_ms.p50, 100, 1e-9);
  EXPECT_NEAR(m.ttft_ms.p90, 260, 1e-9);  // 100 + 0.8 * (300 - 100)
  EXPECT_NEAR(m.tpot_ms.mean, (100 + 50 + 100.0 / 3) / 3, 1e-9);
  EXPECT_EQ(m.itl_ms.count, 4);  // 2 + 1 + 1 gaps
  EXPECT_NEAR(m.itl_ms.mean, (100 + 100 + 50 + 100) / 4.0, 1e-9);
  EXPECT_NEAR(m.e2e_ms.p50, 350, 1e-9);
  EXPECT_NEAR(m.e2e_ms.max, 500, 1e-9);
  EXPECT_DOUBLE_EQ(m.queue_ms.mean, 1.5);
  // No SLOs: every measured completion is good.
  EXPECT_EQ(m.good_requests, 3);
  EXPECT_DOUBLE_EQ(m.goodput, 2.0);
  EXPECT_DOUBLE_EQ(m.good_fraction, 1.0);
}

TEST(ComputeMetricsTest, GoodputUnderSlos) {
  MetricsOptions o;
  o.slo_ttft_ms = 60;  // r1 only
  RunMetrics m = ComputeMetrics(Known(), o);
  EXPECT_EQ(m.good_requests, 1);
  EXPECT_NEAR(m.goodput, 1 / 1.5, 1e-12);
  EXPECT_NEAR(m.good_fraction, 1 / 3.0, 1e-12);

  o = MetricsOptions();
  o.slo_tpot_ms = 60;  // r1 (50) and r3 (33.3)
  m = ComputeMetrics(Known(), o);
  EXPECT_EQ(m.good_requests, 2);

  o.slo_ttft_ms = 60;  // both: r1
  m = ComputeMetrics(Known(), o);
  EXPECT_EQ(m.good_requests, 1);
}

TEST(ComputeMetricsTest, WarmupExcludesRequestsSentBeforeTheKthCompletion) {
  MetricsOptions o;
  o.warmup_requests = 1;  // first completion at 0.35: r0 (sent at 0) is warm-up
  const RunMetrics m = ComputeMetrics(Known(), o);
  EXPECT_EQ(m.warmup_excluded, 1);
  EXPECT_EQ(m.measured, 2);
  EXPECT_EQ(m.sent, 4);  // accounting still covers everything
  EXPECT_EQ(m.completed + m.errors, m.sent);
  EXPECT_DOUBLE_EQ(m.window_start_s, 0.5);
  EXPECT_DOUBLE_EQ(m.window_end_s, 1.5);
  EXPECT_DOUBLE_EQ(m.request_throughput, 2.0);
  EXPECT_NEAR(m.ttft_ms.mean, 175, 1e-9);
}

TEST(ComputeMetricsTest, WarmupLargerThanTheRunMeasuresEverything) {
  MetricsOptions o;
  o.warmup_requests = 10;
  const RunMetrics m = ComputeMetrics(Known(), o);
  EXPECT_EQ(m.warmup_excluded, 0);
  EXPECT_EQ(m.measured, 3);
}

TEST(ComputeMetricsTest, OneTokenRequestsHaveNoTpotAndNoItl) {
  std::vector<RequestRecord> v = {Ok(0, 0, {0.2}, {1}, 0.25)};
  const RunMetrics m = ComputeMetrics(v, MetricsOptions{0, 0, 10});
  EXPECT_EQ(m.tpot_ms.count, 0);
  EXPECT_EQ(m.itl_ms.count, 0);
  EXPECT_EQ(m.good_requests, 1);  // cannot break a TPOT SLO
  EXPECT_EQ(ComputeMetrics({}, MetricsOptions()).sent, 0);
}

// A request sent at `send` that streams `n` tokens, one every `gap` seconds.
RequestRecord Streaming(int64_t index, double send, int n, double gap = 0.01) {
  std::vector<double> times;
  for (int i = 1; i <= n; ++i) times.push_back(send + gap * i);
  return Ok(index, send, times, std::vector<int>(n, 1), send + gap * n + 0.001);
}

TEST(ComputeMetricsTest, StabilityFollowsPerfAnalyzersTenPercentRuleOnTimeWindows) {
  // A closed loop of one: a request every 0.2 s for 6 s, 20 tokens each: 100 tok/s steady.
  std::vector<RequestRecord> even, slowing;
  for (int i = 0; i < 30; ++i) even.push_back(Streaming(i, 0.2 * i, 20));
  const RunMetrics a = ComputeMetrics(even, MetricsOptions());
  ASSERT_EQ(a.stability.window_output_throughput.size(), 3u) << a.stability.note;
  EXPECT_TRUE(a.stability.stable);
  EXPECT_DOUBLE_EQ(a.stability.span_start_s, 0);
  // The last send at 5.8 s; the load is held until the next completion (request 28's).
  EXPECT_NEAR(a.stability.span_end_s, 0.2 * 28 + 0.201, 1e-9);
  for (double x : a.stability.window_output_throughput) EXPECT_NEAR(x, 100, 10);

  // The same, but the server slows down: requests in the last third stream at half speed.
  for (int i = 0; i < 30; ++i) {
    slowing.push_back(i < 20 ? Streaming(i, 0.2 * i, 20) : Streaming(i, 0.2 * i, 10, 0.02));
  }
  const RunMetrics b = ComputeMetrics(slowing, MetricsOptions());
  ASSERT_EQ(b.stability.window_output_throughput.size(), 3u);
  EXPECT_FALSE(b.stability.stable);
}

TEST(ComputeMetricsTest, StabilityNeverPrintsImpossibleRatesForABurst) {
  // The demo's c=16 phase with 24 requests: 16 warm-up requests end together at 5.5 s, the
  // other 8 are sent just after and end together at 11 s. The old check divided 8 completions
  // by the few milliseconds between the first and last of them (34894.41, 0.00, 11631.47
  // req/s). Now: the 5.5 s the 8 streams were in flight, in thirds, tokens per second.
  std::vector<RequestRecord> v;
  for (int i = 0; i < 24; ++i) {
    const double send = i < 16 ? 0.001 * i : 5.52 + 0.001 * (i - 16);
    std::vector<double> times;
    for (int k = 1; k <= 32; ++k) times.push_back(send + 0.17 * k);
    v.push_back(Ok(i, send, times, std::vector<int>(32, 1), send + 5.5));
  }
  MetricsOptions o;
  o.warmup_requests = 16;
  const RunMetrics m = ComputeMetrics(v, o);
  EXPECT_EQ(m.measured, 8);
  ASSERT_EQ(m.stability.window_output_throughput.size(), 3u) << m.stability.note;
  EXPECT_NEAR(m.stability.span_end_s - m.stability.span_start_s, 5.505, 0.01);
  for (double x : m.stability.window_output_throughput) {
    EXPECT_NEAR(x, 8 / 0.17, 8);  // 8 streams, a token every 0.17 s each
  }
  EXPECT_TRUE(m.stability.stable);

  // A run too short to judge says so and prints no rate.
  std::vector<RequestRecord> short_run = {Streaming(0, 0, 5), Streaming(1, 0.01, 5),
                                          Streaming(2, 0.02, 5)};
  const RunMetrics s = ComputeMetrics(short_run, MetricsOptions());
  EXPECT_FALSE(s.stability.stable);
  EXPECT_TRUE(s.stability.window_output_throughput.empty());
  EXPECT_NE(s.stability.note.find("too short to judge"), std::string::npos) << s.stability.note;
}

TEST(ComputeMetricsTest, StabilityRatesAreTokensPerTimeWindow) {
  // Two streams of 100 tokens at 100 tok/s, sent at 0 and 0.5 s. The span runs from the first
  // send to the first completion after the last send (request 0's, 1.001 s); thirds of
  // 0.3337 s hold 33, 33 + 16 and 34 + 34 tokens.
  std::vector<RequestRecord> v = {Streaming(0, 0.0, 100), Streaming(1, 0.5, 100)};
  const RunMetrics m = ComputeMetrics(v, MetricsOptions());
  ASSERT_EQ(m.stability.window_output_throughput.size(), 3u) << m.stability.note;
  EXPECT_NEAR(m.stability.span_end_s, 1.001, 1e-9);
  EXPECT_EQ(m.stability.span_tokens, 150);
  EXPECT_NEAR(m.stability.window_output_throughput[0], 33 / (1.001 / 3), 1e-6);
  EXPECT_NEAR(m.stability.window_output_throughput[1], 49 / (1.001 / 3), 1e-6);
  EXPECT_NEAR(m.stability.window_output_throughput[2], 68 / (1.001 / 3), 1e-6);
  EXPECT_FALSE(m.stability.stable);  // the load doubled half-way
}

}  // namespace
}  // namespace saturn::clients
