// MetricsHttpServer and the exposition text. cpp-httplib (Debian libcpp-httplib-dev, built
// with OpenSSL) is included by this file only.
#include "server/metrics_http.h"

#include <httplib.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/request_metrics.h"
#include "server/security.h"

namespace saturn {
namespace {

void Gauge(const std::string& name, const std::string& help, double v, std::string* out) {
  AppendHeader(name, help, "gauge", out);
  AppendSample(name, "", v, out);
}

void EngineMetrics(const Engine& engine, DiagnosticsState* diag, double window_seconds,
                   std::string* out) {
  const EngineCounters n = engine.counters();
  const KvStats kv = engine.info().kv;
  Gauge("saturn:num_requests_running", "Requests in the running batch.", n.num_running, out);
  Gauge("saturn:num_requests_waiting", "Requests waiting to be scheduled.", n.num_waiting, out);
  Gauge("saturn:kv_cache_usage_perc", "KV cache blocks in use (1 = full).",
        kv.num_blocks > 0 ? 1.0 - static_cast<double>(kv.blocks_free) / kv.num_blocks : 0, out);
  AppendHeader("saturn:engine_steps_total", "Engine steps run.", "counter", out);
  AppendSample("saturn:engine_steps_total", "", static_cast<double>(n.steps), out);
  diag->request_metrics()->ObserveSteps(engine.steps());

  const double now = NowUs();
  const DiagnosticsReport r = diag->BuildReport(engine, now - window_seconds * 1e6, now);
  Gauge("saturn:diagnostics_window_seconds", "Window of the saturn: diagnostics gauges below.",
        window_seconds, out);
  AppendHeader("saturn:bottleneck_class",
               "1 for the window's bottleneck class (UNKNOWN: no steps), 0 for the others.",
               "gauge", out);
  for (Bottleneck b : {Bottleneck::kUnknown, Bottleneck::kUnderloaded, Bottleneck::kLaunchBound,
                       Bottleneck::kMemoryBound, Bottleneck::kComputeBound}) {
    AppendSample("saturn:bottleneck_class", absl::StrCat("class=\"", BottleneckName(b), "\""),
                 r.verdict.bottleneck == b ? 1 : 0, out);
  }
  const Profile& p = r.profile;
  Gauge("saturn:mfu", "Achieved FLOP/s over the calibrated GEMM peak.", p.mfu, out);
  Gauge("saturn:mbu", "Achieved bytes/s over the calibrated bandwidth.", p.mbu, out);
  Gauge("saturn:busy_fraction", "Device busy share of the window (what nvidia-smi reports).",
        p.busy_fraction, out);
  Gauge("saturn:idle_fraction", "Share of the window with no step running.", p.idle_share, out);
  Gauge("saturn:tokens_per_second", "Prefill + decode tokens per second over the window.",
        p.tokens_per_s, out);
  Gauge("saturn:mean_batch_seqs", "Mean sequences per step over the window.", p.mean_batch_seqs,
        out);
  Gauge("saturn:cpu_run_share",
        "Of the time the threads running the window's steps were runnable, the share they had a "
        "core (schedstat; under 1: other processes held the cores).",
        r.verdict.run_share, out);
  Gauge("saturn:plan_actions", "Actions in the window's saturation plan.",
        static_cast<double>(r.plan.actions.size()), out);
}

}  // namespace

std::string RenderMetrics(ServingState* state, DiagnosticsState* diag, double window_seconds) {
  std::string out;
  std::optional<int64_t> token = state->BeginCall(nullptr);
  if (token.has_value()) {
    if (Engine* engine = state->engine(); engine != nullptr) {
      EngineMetrics(*engine, diag, window_seconds, &out);
    }
    state->EndCall(*token);
  }
  if (std::optional<Calibration> cal = diag->calibration(); cal.has_value()) {
    Gauge("saturn:calibrated_gemm_flops", "Calibrated GEMM peak (FLOP/s).", cal->gemm_flops_per_s,
          &out);
    Gauge("saturn:calibrated_bandwidth_bytes", "Calibrated memory bandwidth (bytes/s).",
          cal->bandwidth_bytes_per_s, &out);
    Gauge("saturn:calibrated_op_dispatch_seconds", "Calibrated cost of issuing one op.",
          cal->op_dispatch_us * 1e-6, &out);
    Gauge("saturn:calibration_age_seconds",
          "Seconds since the ceilings in force were measured (-1: unknown).",
          diag->calibration_age_s(), &out);
    Gauge("saturn:calibration_suspect",
          "1 when a report saw an achieved rate above a calibrated ceiling (cleared by "
          "Recalibrate).",
          diag->calibration_suspect() ? 1.0 : 0.0, &out);
    Gauge("saturn:calibration_stable", "1 when every calibration series met its stability test.",
          cal->stable ? 1.0 : 0.0, &out);
  }
  diag->request_metrics()->Render(&out);
  return out;
}

MetricsHttpServer::MetricsHttpServer(ServingState* state, DiagnosticsState* diag,
                                     double window_seconds)
    : state_(state), diag_(diag), window_seconds_(window_seconds) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start(const std::string& host, int port) {
  if (http_ != nullptr) return absl::FailedPreconditionError("metrics endpoint started twice");
  // The gRPC port's security applies here too (server/security.h): HTTPS with the same
  // certificate (and client CA), and the bearer token under --auth_scope=all.
  const ServerConfig& config = state_->config();
  if (!config.tls_cert.empty()) {
    auto https = std::make_unique<httplib::SSLServer>(
        config.tls_cert.c_str(), config.tls_key.c_str(),
        config.tls_client_ca.empty() ? nullptr : config.tls_client_ca.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(
          "--tls_cert, --tls_key: the metrics endpoint cannot load them (PEM certificate and "
          "matching key expected)");
    }
    http_ = std::move(https);
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  if (config.auth_scope == "all") {
    absl::StatusOr<std::string> token = ReadAuthToken(config.auth_token_file);
    if (!token.ok()) {
      http_.reset();
      return token.status();
    }
    http_->set_pre_routing_handler(
        [token = *token](const httplib::Request& req, httplib::Response& res) {
          if (BearerMatches(req.get_header_value("Authorization"), token)) {
            return httplib::Server::HandlerResponse::Unhandled;
          }
          res.status = 401;
          res.set_header("WWW-Authenticate", "Bearer");
          res.set_content("saturn-server: send \"Authorization: Bearer <token>\"\n", "text/plain");
          return httplib::Server::HandlerResponse::Handled;
        });
  }
  // Scrapes are rare and cheap: two workers, not httplib's default pool.
  http_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(state_, diag_, window_seconds_),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("saturn-server: metrics at /metrics\n", "text/plain");
  });
  const int bound =
      port < 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    http_.reset();
    return absl::UnavailableError(
        absl::StrFormat("--metrics_port: cannot listen on %s:%d (address in use?)", host, port));
  }
  port_ = bound;
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace saturn
