// What saturn-load's flags become, and its checks. Field names follow the flag names so that
// every error names the flag to fix and the limit it broke. Flags themselves live only in
// clients/tools/saturn-load.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clients/common/channel_security.h"
#include "clients/load/workload.h"

namespace saturn::clients {

struct LoadConfig {
  // "grpc": saturn.v1.Saturn/Generate at host:port targets; "openai": POST /v1/completions at
  // http(s)://host:port targets (any OpenAI-compatible server: vLLM, llama.cpp, TGI, Saturn).
  std::string api = "grpc";
  std::vector<std::string> target = {"127.0.0.1:50051"};
  // --api openai: the model to ask for ("": the first id GET /v1/models lists).
  std::string model_name;
  // --api openai: Saturn's gRPC host:port, for the server's diagnosis and model limits ("": the
  // server may not be Saturn, so the diagnosis is skipped).
  std::string diag_target;
  // --compare api: the OpenAI HTTP front(s) of the --target servers, http(s)://host:port.
  std::vector<std::string> openai_target;
  // Closed loop: one phase per value (a sweep). Ignored in the open loop.
  std::vector<int> concurrency = {1};
  // Open loop when non-empty: one phase per rate (req/s; inf = all at once).
  std::vector<double> request_rate;
  int64_t num_requests = 0;  // per phase; 0: bounded by duration only
  double duration_s = 0;     // per phase; 0: bounded by num_requests only
  // Per phase: keep sending past the bounds until the load has run this long after the
  // warm-up (runner.h PhaseSettings::min_measure_s); 0: stop at the bounds.
  double min_measure_s = 0;
  // Synthetic prompts: the same prefix_len seeded random ids first in every prompt (a prefix
  // the server's cache can share), then input_len ids of the request's own.
  int prefix_len = 0;
  LengthSpec input_len{LengthSpec::Kind::kFixed, 32, 0};
  LengthSpec output_len{LengthSpec::Kind::kFixed, 32, 0};
  std::string prompts;  // JSONL file; empty: synthetic prompts
  uint64_t seed = 0;
  double temperature = 0;
  bool ignore_eos = true;
  // Requests excluded as warm-up (stats.h's rule); -1: auto = the closed loop's
  // concurrency, or 10 % of the requests (rounded up) in the open loop.
  int warmup_requests = -1;
  double slo_ttft_ms = 0;  // 0: none
  double slo_tpot_ms = 0;  // 0: none
  std::string compare;     // "", "cuda_graphs" or "api"
  // After each phase, follow the server's top plan action once (plan_follow.h): apply its
  // options or its client concurrency, run the phase again, and compare with the prediction.
  bool follow_plan = false;
  double connect_timeout_s = 10;
  double request_timeout_s = 600;
  int64_t max_errors = 100;  // 0: never stop early for errors
  std::string json;          // output files ("" = none)
  std::string csv;
  bool progress = true;
  ChannelSecurityFlags security;  // TLS, client certificate, bearer token on every channel

  bool open_loop() const { return !request_rate.empty(); }
  bool openai() const { return api == "openai"; }
  bool compare_api() const { return compare == "api"; }
  absl::Status Validate() const;
};

// "1,2,4,8" -> {1,2,4,8}; each value in [1, 100000].
absl::StatusOr<std::vector<int>> ParseConcurrencyList(const std::string& flag,
                                                      const std::string& text);
// "1.5,4,inf" -> rates; each > 0 or inf.
absl::StatusOr<std::vector<double>> ParseRateList(const std::string& flag, const std::string& text);
// "a:1,b:2" -> {"a:1","b:2"}; empty entries are errors.
absl::StatusOr<std::vector<std::string>> ParseTargetList(const std::string& flag,
                                                         const std::string& text);

// The warm-up count a phase uses (resolves -1): `concurrency` for a closed-loop phase, 10 % of
// `sent` for an open-loop one (concurrency 0).
int EffectiveWarmup(const LoadConfig& config, int concurrency, int64_t sent);

}  // namespace saturn::clients
