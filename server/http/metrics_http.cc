// MetricsHttpServer and the exposition text, served by cpp-httplib with the gRPC port's
// security (server/http/http_listener.h).
#include "server/http/metrics_http.h"

#include <httplib.h>

#include <initializer_list>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/diag/request_metrics.h"
#include "server/http/elastic_task_queue.h"
#include "server/http/http_listener.h"

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
  for (const auto& [name, help, value] :
       std::initializer_list<std::tuple<const char*, const char*, int64_t>>{
           {"saturn:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache when requests were admitted.",
            n.prefix_cache_queries},
           {"saturn:prefix_cache_hits_total",
            "Of them, tokens found in cached KV blocks and not computed.", n.prefix_cache_hits},
           {"saturn:prefix_cache_missed_total",
            "With prefix caching off: tokens that were in cached KV blocks and were computed "
            "again.",
            n.prefix_cache_missed},
           {"saturn:spec_decode_num_drafts_total",
            "Speculative decoding: decode rows that verified proposed tokens.", n.spec_drafts},
           {"saturn:spec_decode_num_draft_tokens_total", "Speculative decoding: tokens proposed.",
            n.spec_draft_tokens},
           {"saturn:spec_decode_num_accepted_tokens_total",
            "Speculative decoding: proposed tokens kept (the model drew them).",
            n.spec_accepted_tokens}}) {
    AppendHeader(name, help, "counter", out);
    AppendSample(name, "", static_cast<double>(value), out);
  }
  diag->request_metrics()->ObserveSteps(engine.steps());

  const double now = NowUs();
  const DiagnosticsReport r = diag->session().BuildReport(engine, now - window_seconds * 1e6, now);
  Gauge("saturn:diagnostics_window_seconds", "Window of the saturn: diagnostics gauges below.",
        window_seconds, out);
  AppendHeader("saturn:bottleneck_class",
               "1 for the window's bottleneck class (UNKNOWN: no steps), 0 for the others.",
               "gauge", out);
  for (Bottleneck b : {Bottleneck::kUnknown, Bottleneck::kUnderloaded, Bottleneck::kLaunchBound,
                       Bottleneck::kMemoryBound, Bottleneck::kComputeBound, Bottleneck::kHostBound,
                       Bottleneck::kCommunicationBound}) {
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
  if (const double nvml = diag->device_utilization_percent(now - window_seconds * 1e6, now);
      nvml >= 0) {
    Gauge("saturn:nvml_gpu_utilization_percent",
          "NVML's utilization.gpu (what nvidia-smi shows), mean over the window of readings "
          "every 200 ms.",
          nvml, out);
  }
  Gauge("saturn:cpu_run_share",
        "Of the time the threads running the window's steps were runnable, the share they had a "
        "core (schedstat; under 1: other processes held the cores).",
        r.verdict.run_share, out);
  Gauge("saturn:plan_actions", "Actions in the window's saturation plan.",
        static_cast<double>(r.plan.actions.size()), out);
  const EngineInfo info = engine.info();
  Gauge("saturn:weight_bytes",
        "Bytes of weights this process holds (under tensor parallelism: this rank's share of the "
        "layers and of the LM head's vocabulary, and the whole embedding).",
        static_cast<double>(info.weight_bytes), out);
  if (const TensorParallelProfile& t = r.verdict.tensor_parallel; info.tensor_parallel > 1) {
    Gauge("saturn:tensor_parallel_ranks", "Ranks the model is split over (--tensor_parallel).",
          info.tensor_parallel, out);
    Gauge("saturn:tp_collective_share",
          "Rank 0's time in collectives (all-reduces) over its step time, over the window.",
          t.comm_share, out);
    Gauge("saturn:tp_wait_share",
          "Of all ranks' collective time, the share spent waiting for a slower rank.", t.wait_share,
          out);
    Gauge("saturn:tp_load_balance", "Mean over ranks of compute time over the largest (1: even).",
          t.load_balance, out);
    Gauge("saturn:tp_slowest_rank", "The rank that computed longest over the window.",
          t.slowest_rank, out);
  }
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
  if (std::optional<Calibration> cal = diag->session().calibration(); cal.has_value()) {
    Gauge("saturn:calibrated_gemm_flops", "Calibrated GEMM peak (FLOP/s).", cal->gemm_flops_per_s,
          &out);
    Gauge("saturn:calibrated_bandwidth_bytes", "Calibrated memory bandwidth (bytes/s).",
          cal->bandwidth_bytes_per_s, &out);
    Gauge("saturn:calibrated_op_dispatch_seconds", "Calibrated cost of issuing one op.",
          cal->op_dispatch_us * 1e-6, &out);
    Gauge("saturn:calibration_age_seconds",
          "Seconds since the ceilings in force were measured (-1: unknown).",
          diag->session().calibration_age_s(), &out);
    Gauge("saturn:calibration_suspect",
          "1 when a report saw an achieved rate above a calibrated ceiling (cleared by "
          "Recalibrate).",
          diag->session().calibration_suspect() ? 1.0 : 0.0, &out);
    Gauge("saturn:calibration_stable", "1 when every calibration series met its stability test.",
          cal->stable ? 1.0 : 0.0, &out);
  }
  diag->request_metrics()->Render(&out);
  return out;
}

void AddMetricsRoute(httplib::Server& http, ServingState* state, DiagnosticsState* diag,
                     double window_seconds) {
  http.Get("/metrics",
           [state, diag, window_seconds](const httplib::Request&, httplib::Response& res) {
             res.set_content(RenderMetrics(state, diag, window_seconds),
                             "text/plain; version=0.0.4; charset=utf-8");
           });
}

MetricsHttpServer::MetricsHttpServer(ServingState* state, DiagnosticsState* diag,
                                     double window_seconds)
    : state_(state), diag_(diag), window_seconds_(window_seconds) {}

absl::Status MetricsHttpServer::Start(const std::string& host, int port) {
  if (absl::Status s = listener_.Init(state_->config(), "the metrics endpoint",
                                      [](httplib::Response& res) {
                                        res.set_content(
                                            "saturn-server: send \"Authorization: Bearer "
                                            "<token>\"\n",
                                            "text/plain");
                                      });
      !s.ok()) {
    return s;
  }
  httplib::Server& http = listener_.server();
  // Scrapes are rare and cheap: a few workers, not httplib's default pool, and a connection
  // that sends nothing gives its worker back after 2 s (httplib's default is 5), so a few idle
  // or dripping connections cannot hold every worker through a scrape's timeout.
  http.new_task_queue = [] {
    return new ElasticTaskQueue(8, /*keep_threads=*/1, absl::Seconds(30));
  };
  http.set_read_timeout(2, 0);
  http.set_keep_alive_timeout(2);
  AddMetricsRoute(http, state_, diag_, window_seconds_);
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("saturn-server: metrics at /metrics\n", "text/plain");
  });
  return listener_.Listen(host, port, "--metrics_port");
}

}  // namespace saturn
