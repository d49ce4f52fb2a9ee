// saturn-load's settings: list parsing and Validate(), whose errors name the flag and limit.
#include <gtest/gtest.h>

#include <cmath>

#include "clients/load/config.h"

namespace saturn::clients {
namespace {

void ExpectBad(const LoadConfig& c, const std::string& flag) {
  absl::Status s = c.Validate();
  ASSERT_FALSE(s.ok()) << flag;
  EXPECT_EQ(std::string(s.message()).rfind(flag, 0), 0u) << s;
}

LoadConfig Good() {
  LoadConfig c;
  c.num_requests = 10;
  return c;
}

TEST(LoadConfigTest, DefaultsWithABoundAreValid) { EXPECT_TRUE(Good().Validate().ok()); }

TEST(LoadConfigTest, EachBadValueNamesItsFlag) {
  LoadConfig c = Good();
  c.num_requests = 0;
  ExpectBad(c, "--num_requests");  // no bound at all
  c = Good();
  c.target.clear();
  ExpectBad(c, "--target");
  c = Good();
  c.concurrency = {4, 0};
  ExpectBad(c, "--concurrency");
  c = Good();
  c.duration_s = -1;
  ExpectBad(c, "--duration");
  c = Good();
  c.num_requests = 0;
  c.duration_s = 5;
  c.request_rate = {INFINITY};
  ExpectBad(c, "--request_rate");  // inf needs a count
  c = Good();
  c.slo_ttft_ms = -1;
  ExpectBad(c, "--slo_ttft_ms");
  c = Good();
  c.compare = "graphs";
  ExpectBad(c, "--compare");
  c = Good();
  c.connect_timeout_s = 0;
  ExpectBad(c, "--connect_timeout");
  c = Good();
  c.warmup_requests = -2;
  ExpectBad(c, "--warmup_requests");
  c = Good();
  c.temperature = -0.5;
  ExpectBad(c, "--temperature");
  // Values past what a run can use: they overflowed deadlines and end times, or never came.
  c = Good();
  c.duration_s = 1e13;
  ExpectBad(c, "--duration");
  c = Good();
  c.request_rate = {1e-9};
  ExpectBad(c, "--request_rate");
  c = Good();
  c.request_timeout_s = INFINITY;
  ExpectBad(c, "--request_timeout");
  c = Good();
  c.connect_timeout_s = INFINITY;
  ExpectBad(c, "--connect_timeout");
  c = Good();
  c.slo_tpot_ms = INFINITY;
  ExpectBad(c, "--slo_tpot_ms");
  c = Good();
  c.json = c.csv = "/tmp/same.out";
  ExpectBad(c, "--csv");
  c = Good();
  c.num_requests = 2;
  c.warmup_requests = 2;
  ExpectBad(c, "--warmup_requests");
  c = Good();
  c.prefix_len = -1;
  ExpectBad(c, "--prefix_len");
  c = Good();
  c.prefix_len = kMaxLength + 1;
  ExpectBad(c, "--prefix_len");
  c = Good();
  c.prefix_len = 16;
  c.prompts = "prompts.jsonl";  // a shared prefix is the synthetic workload's
  ExpectBad(c, "--prefix_len");
  c.prompts.clear();
  EXPECT_TRUE(c.Validate().ok());
}

TEST(LoadConfigTest, ApiFlagsAreCheckedTogether) {
  LoadConfig c = Good();
  c.api = "http";
  ExpectBad(c, "--api");
  c = Good();
  c.api = "openai";
  c.target = {"127.0.0.1:8000"};  // no scheme
  ExpectBad(c, "--target");
  EXPECT_NE(std::string(c.Validate().message()).find("http://"), std::string::npos);
  c.target = {"http://127.0.0.1:8000", "https://b:8001"};
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c = Good();
  c.target = {"http://127.0.0.1:8000"};  // a URL for the gRPC API
  ExpectBad(c, "--target");
  EXPECT_NE(std::string(c.Validate().message()).find("--api openai"), std::string::npos);

  c = Good();
  c.api = "openai";
  c.target = {"http://a:1"};
  c.diag_target = "a:50051";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.diag_target = "http://a:50051";
  ExpectBad(c, "--diag_target");
  c = Good();
  c.diag_target = "a:50051";  // --api grpc diagnoses --target
  ExpectBad(c, "--diag_target");
  c = Good();
  c.model_name = "m";
  ExpectBad(c, "--model_name");

  c = Good();
  c.compare = "api";
  ExpectBad(c, "--openai_target");  // needed
  c.openai_target = {"http://127.0.0.1:8080"};
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.openai_target = {"http://127.0.0.1:8080", "http://127.0.0.1:8081"};  // 2 fronts for 1
  ExpectBad(c, "--openai_target");
  c.openai_target = {"127.0.0.1:8080"};
  ExpectBad(c, "--openai_target");
  c = Good();
  c.openai_target = {"http://127.0.0.1:8080"};  // without --compare api
  ExpectBad(c, "--openai_target");
  c = Good();
  c.api = "openai";
  c.target = {"http://a:1"};
  c.compare = "api";
  ExpectBad(c, "--compare");
  c.compare = "cuda_graphs";
  ExpectBad(c, "--compare");

  c = Good();
  c.api = "openai";
  c.target = {"http://a:1"};
  c.security.tls_ca = "ca.pem";  // TLS over plain http
  ExpectBad(c, "--tls_ca");
  c.target = {"https://a:1"};
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(LoadConfigTest, ListsParse) {
  EXPECT_EQ(*ParseConcurrencyList("--concurrency", "1, 4,16"), (std::vector<int>{1, 4, 16}));
  EXPECT_FALSE(ParseConcurrencyList("--concurrency", "1,,2").ok());
  EXPECT_FALSE(ParseConcurrencyList("--concurrency", "2.5").ok());
  auto rates = ParseRateList("--request_rate", "0.5,inf");
  ASSERT_TRUE(rates.ok());
  EXPECT_DOUBLE_EQ((*rates)[0], 0.5);
  EXPECT_TRUE(std::isinf((*rates)[1]));
  EXPECT_EQ(ParseTargetList("--target", "a:1,b:2")->size(), 2u);
  EXPECT_FALSE(ParseTargetList("--target", "a:1,").ok());
}

TEST(LoadConfigTest, AutoWarmup) {
  LoadConfig c = Good();
  EXPECT_EQ(EffectiveWarmup(c, 8, 100), 8);
  c.request_rate = {2};
  EXPECT_EQ(EffectiveWarmup(c, 0, 95), 10);
  // The closed-loop phase that follows an open-loop phase's "raise client concurrency".
  EXPECT_EQ(EffectiveWarmup(c, 45, 95), 45);
  c.warmup_requests = 3;
  EXPECT_EQ(EffectiveWarmup(c, 0, 95), 3);
}

}  // namespace
}  // namespace saturn::clients
