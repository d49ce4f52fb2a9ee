// LoadConfig checks and list parsing (see config.h).
#include "clients/load/config.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "clients/common/connection.h"
#include "clients/load/arrivals.h"
#include "clients/load/openai_wire.h"

namespace saturn::clients {
namespace {

constexpr double kMaxSeconds = 7 * 86400;  // a week: the longest run or wait a flag asks for

absl::Status Bad(const std::string& flag, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", what));
}

std::vector<std::string> Items(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

// The --api, target and comparison flags together (TLS flag combinations are
// ChannelSecurityFlags::Validate's).
absl::Status ValidateApi(const LoadConfig& c) {
  if (c.api != "grpc" && c.api != "openai") {
    return Bad("--api", absl::StrCat("expected grpc or openai, got \"", c.api, "\""));
  }
  for (const std::string& t : c.target) {
    if (c.openai()) {
      if (absl::Status s = ParseHttpTarget("--target", t).status(); !s.ok()) {
        return Bad("--target", absl::StrCat("with --api openai each target is a URL: ",
                                            absl::StripPrefix(s.message(), "--target: ")));
      }
    } else if (LooksLikeUrl(t)) {
      return Bad("--target", absl::StrCat("\"", t,
                                          "\" is a URL, but gRPC targets are host:port (add --api "
                                          "openai to drive an OpenAI-compatible server)"));
    }
  }
  for (const std::string& t : c.openai_target) {
    if (absl::Status s = ParseHttpTarget("--openai_target", t).status(); !s.ok()) return s;
  }
  std::vector<std::string> urls = c.openai() ? c.target : c.openai_target;
  if (c.security.tls()) {
    for (const std::string& u : urls) {
      if (!ParseHttpTarget("", u)->https) {
        return Bad("--tls_ca",
                   absl::StrCat("TLS is on, but ", u, " is plain http://; use https://"));
      }
    }
  }
  if (c.compare_api()) {
    if (c.openai()) {
      return Bad("--compare",
                 "api compares Saturn's gRPC --target with its --openai_target; "
                 "leave --api at grpc");
    }
    if (c.openai_target.empty()) {
      return Bad("--openai_target",
                 "--compare api needs Saturn's OpenAI-compatible front, "
                 "http://host:port (saturn-server --http_port)");
    }
    // The same servers' two fronts: one URL per gRPC target, or one side spreads its load over
    // more replicas than the other.
    if (c.openai_target.size() != c.target.size()) {
      return Bad("--openai_target",
                 absl::StrCat("--compare api needs one URL per --target (the same servers' two "
                              "fronts): got ",
                              c.openai_target.size(), " for ", c.target.size()));
    }
  } else if (!c.openai_target.empty()) {
    return Bad("--openai_target", "is only used with --compare api");
  }
  if (!c.diag_target.empty()) {
    if (!c.openai()) {
      return Bad("--diag_target",
                 "is only for --api openai (with --api grpc the diagnosis comes from --target)");
    }
    if (LooksLikeUrl(c.diag_target) || !SplitHostPort(c.diag_target).ok()) {
      return Bad("--diag_target",
                 absl::StrCat("expected Saturn's gRPC host:port, got \"", c.diag_target, "\""));
    }
  }
  if (!c.model_name.empty() && !c.openai() && !c.compare_api()) {
    return Bad("--model_name", "names the model of an OpenAI-compatible server: add --api openai");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseConcurrencyList(const std::string& flag,
                                                      const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : Items(text)) {
    int n = 0;
    if (!absl::SimpleAtoi(item, &n) || n < 1 || n > 100000) {
      return Bad(flag, absl::StrCat("expected a comma-separated list of integers in [1, 100000], "
                                    "got \"",
                                    item, "\" in \"", text, "\""));
    }
    out.push_back(n);
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseRateList(const std::string& flag,
                                                  const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : Items(text)) {
    absl::StatusOr<double> r = ParseRate(flag, item);
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseTargetList(const std::string& flag,
                                                         const std::string& text) {
  std::vector<std::string> out = Items(text);
  for (const std::string& t : out) {
    if (t.empty()) return Bad(flag, absl::StrCat("empty entry in \"", text, "\""));
  }
  return out;
}

absl::Status LoadConfig::Validate() const {
  if (target.empty()) return Bad("--target", "at least one host:port is needed");
  if (absl::Status s = security.Validate(); !s.ok()) return s;
  if (absl::Status s = ValidateApi(*this); !s.ok()) return s;
  if (!open_loop() && concurrency.empty()) return Bad("--concurrency", "at least one value");
  for (int c : concurrency) {
    if (c < 1 || c > 100000)
      return Bad("--concurrency", absl::StrCat("must be in [1, 100000], got ", c));
  }
  for (double r : request_rate) {
    // Below one request in 1000 s the first arrival is effectively never (1e-9: years).
    if (!(r >= 1e-3)) {
      return Bad("--request_rate", absl::StrCat("must be >= 0.001 (req/s) or inf, got ", r));
    }
  }
  if (num_requests < 0)
    return Bad("--num_requests", absl::StrCat("must be >= 0, got ", num_requests));
  // A week at most: past about 1e13 s the end time overflowed and the run sent nothing.
  if (!(duration_s >= 0) || !(duration_s <= kMaxSeconds)) {
    return Bad("--duration", absl::StrCat("must be in [0, ", kMaxSeconds, "] s, got ", duration_s));
  }
  if (num_requests == 0 && duration_s == 0) {
    return Bad("--num_requests", "set --num_requests and/or --duration (a run needs a bound)");
  }
  for (double r : request_rate) {
    if (std::isinf(r) && num_requests == 0) {
      return Bad("--request_rate", "inf sends everything at once, so it needs --num_requests");
    }
  }
  if (prefix_len < 0 || prefix_len > kMaxLength) {
    return Bad("--prefix_len", absl::StrCat("must be in [0, ", kMaxLength, "], got ", prefix_len));
  }
  if (prefix_len > 0 && !prompts.empty()) {
    return Bad("--prefix_len", "shares a prefix among synthetic prompts: not with --prompts");
  }
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    return Bad("--temperature", absl::StrCat("must be finite and >= 0, got ", temperature));
  }
  if (warmup_requests < -1) {
    return Bad("--warmup_requests",
               absl::StrCat("must be >= 0 or -1 (auto), got ", warmup_requests));
  }
  // (Past the run's requests the warm-up used to be dropped: every request was measured.)
  if (num_requests > 0 && warmup_requests >= num_requests) {
    return Bad("--warmup_requests", absl::StrCat("must be below --num_requests (", num_requests,
                                                 ") so some are measured, got ", warmup_requests));
  }
  if (!(slo_ttft_ms >= 0) || !std::isfinite(slo_ttft_ms))
    return Bad("--slo_ttft_ms", absl::StrCat("must be finite and >= 0, got ", slo_ttft_ms));
  if (!(slo_tpot_ms >= 0) || !std::isfinite(slo_tpot_ms))
    return Bad("--slo_tpot_ms", absl::StrCat("must be finite and >= 0, got ", slo_tpot_ms));
  if (!compare.empty() && compare != "cuda_graphs" && compare != "api") {
    return Bad("--compare", absl::StrCat("expected cuda_graphs or api, got \"", compare, "\""));
  }
  if (compare == "cuda_graphs" && openai()) {
    return Bad("--compare",
               "cuda_graphs switches graphs over Saturn's gRPC API: leave --api at grpc");
  }
  if (follow_plan && !compare.empty()) {
    return Bad("--follow_plan", "follows one server's plan: not with --compare");
  }
  if (follow_plan && openai() && diag_target.empty()) {
    return Bad("--follow_plan",
               "with --api openai needs --diag_target (Saturn's gRPC host:port) to read the plan "
               "and send its options");
  }
  // inf overflowed the deadline into the past: every call failed at once.
  if (!(connect_timeout_s > 0) || !(connect_timeout_s <= kMaxSeconds)) {
    return Bad("--connect_timeout",
               absl::StrCat("must be in (0, ", kMaxSeconds, "] s, got ", connect_timeout_s));
  }
  if (!(request_timeout_s > 0) || !(request_timeout_s <= kMaxSeconds)) {
    return Bad("--request_timeout",
               absl::StrCat("must be in (0, ", kMaxSeconds, "] s, got ", request_timeout_s));
  }
  if (!json.empty() && json == csv) {
    return Bad("--csv", absl::StrCat("is the same file as --json (", json, ")"));
  }
  if (!(min_measure_s >= 0) || min_measure_s > 86400) {
    return Bad("--min_measure_s", absl::StrCat("must be in [0, 86400] s, got ", min_measure_s));
  }
  if (max_errors < 0) return Bad("--max_errors", absl::StrCat("must be >= 0, got ", max_errors));
  return absl::OkStatus();
}

int EffectiveWarmup(const LoadConfig& config, int concurrency, int64_t sent) {
  if (config.warmup_requests >= 0) return config.warmup_requests;
  // A closed-loop phase (concurrency > 0; also one that follows an open-loop phase's plan).
  if (!config.open_loop() || concurrency > 0) return concurrency;
  return static_cast<int>((sent + 9) / 10);
}

}  // namespace saturn::clients
