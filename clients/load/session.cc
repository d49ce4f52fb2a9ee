// RunSession (see session.h): the order of phases, the CUDA-graphs switching, and the
// exit-code policy.
#include "clients/load/session.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace saturn::clients {
namespace {

constexpr double kControlTimeoutS = 30;

std::string RateText(double r) { return std::isinf(r) ? "inf" : absl::StrCat(r); }

absl::StatusOr<std::unique_ptr<Workload>> BuildWorkload(const LoadConfig& c,
                                                        const v1::ServerInfo& info) {
  ModelLimits limits;
  limits.vocab_size = info.model().vocab_size();
  limits.max_model_len = info.limits().max_model_len();
  limits.avoid_token_ids = {info.model().bos_token_id(), info.model().eos_token_id()};
  if (!c.prompts.empty()) return LoadJsonlWorkload(c.prompts, c.output_len, limits, c.seed);
  return MakeSyntheticWorkload(c.input_len, c.output_len, limits, c.seed);
}

std::string ErrorSummary(const std::vector<PhaseReport>& phases) {
  std::map<std::string, int64_t> by_code;
  int64_t errors = 0, sent = 0;
  std::string first;
  for (const PhaseReport& p : phases) {
    sent += p.metrics.sent;
    errors += p.metrics.errors;
    for (const auto& [code, n] : p.metrics.errors_by_code) by_code[code] += n;
    for (const RequestRecord& r : p.outcome.records) {
      if (first.empty() && !r.ok()) first = absl::StrCat(r.status, ": ", r.error_message);
    }
  }
  if (errors == 0) return "";
  std::vector<std::string> parts;
  parts.reserve(by_code.size());
  for (const auto& [code, n] : by_code) parts.push_back(absl::StrCat(code, " x", n));
  return absl::StrCat(errors, " of ", sent, " requests failed (", absl::StrJoin(parts, ", "),
                      "); first: ", first);
}

}  // namespace

std::vector<ServerWindow> ServerWindows(const Connection& conn,
                                        const std::vector<RequestRecord>& records,
                                        const RunMetrics& metrics) {
  std::map<std::string, ServerWindow> by_peer;
  for (const RequestRecord& r : records) {
    if (!r.ok() || r.send_s < metrics.window_start_s || r.server_arrival_us == 0) continue;
    auto [it, inserted] = by_peer.try_emplace(r.peer);
    ServerWindow& w = it->second;
    if (inserted) {
      w.peer = r.peer;
      w.start_us = r.server_arrival_us;
      w.end_us = r.server_finished_us;
      for (size_t i = 0; i < conn.targets().size(); ++i) {
        const TargetInfo& t = conn.targets()[i];
        if (absl::EndsWith(r.peer, t.resolved) || absl::EndsWith(r.peer, t.target)) {
          w.target_index = i;
        }
      }
    }
    w.start_us = std::min(w.start_us, r.server_arrival_us);
    w.end_us = std::max(w.end_us, r.server_finished_us);
  }
  std::vector<ServerWindow> out;
  out.reserve(by_peer.size());
  for (auto& [peer, w] : by_peer) out.push_back(w);
  return out;
}

SessionResult RunSession(const LoadConfig& config, const SessionObserver& observer,
                         const std::atomic<bool>* interrupt) {
  SessionResult res;
  res.config = config;
  res.compare = config.compare == "cuda_graphs";
  auto fail = [&res](int code, std::string msg) {
    res.exit_code = code;
    res.error = std::move(msg);
    return res;
  };
  if (absl::Status s = config.Validate(); !s.ok()) return fail(2, std::string(s.message()));

  absl::StatusOr<std::shared_ptr<const ChannelSecurity>> security =
      ChannelSecurity::Load(config.security);
  if (!security.ok()) return fail(2, std::string(security.status().message()));
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      Connection::Connect(config.target, config.connect_timeout_s, *std::move(security));
  if (!conn.ok()) {
    return fail(conn.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1,
                std::string(conn.status().message()));
  }
  res.targets = (*conn)->targets();
  res.balanced_uri = (*conn)->balanced_uri();
  const v1::ServerInfo& info0 = res.targets[0].info;
  for (const TargetInfo& t : res.targets) {
    if (t.info.model().vocab_size() != info0.model().vocab_size()) {
      return fail(
          2, absl::StrCat("--target: ", t.target, " serves a model with vocab_size ",
                          t.info.model().vocab_size(), " but ", res.targets[0].target, " one with ",
                          info0.model().vocab_size(), "; one run needs one model"));
    }
  }
  absl::StatusOr<std::unique_ptr<Workload>> workload = BuildWorkload(config, info0);
  if (!workload.ok()) return fail(2, std::string(workload.status().message()));
  res.workload = (*workload)->Describe();
  res.workload_adjustment = (*workload)->Adjustment();

  // Graphs: ask for them once before any load, so a server without them costs nothing.
  std::vector<int> graph_settings = {-1};
  const bool graphs_before = info0.options().cuda_graphs();
  if (res.compare) {
    if (absl::Status s = (*conn)->SetCudaGraphs(true, kControlTimeoutS); !s.ok()) {
      if (s.code() == absl::StatusCode::kFailedPrecondition) {
        return fail(1, absl::StrCat("--compare=cuda_graphs: this server cannot use CUDA graphs, so "
                                    "there is nothing to compare; nothing was measured (",
                                    s.message(), ")"));
      }
      return fail(1, absl::StrCat("--compare=cuda_graphs: ", s.message()));
    }
    graph_settings = {0, 1};
  }

  struct Point {
    bool open;
    int concurrency;
    double rate;
  };
  std::vector<Point> points;
  if (config.open_loop()) {
    for (double r : config.request_rate) points.push_back({true, 0, r});
  } else {
    for (int c : config.concurrency) points.push_back({false, c, 0});
  }

  for (const Point& pt : points) {
    for (int graphs : graph_settings) {
      if (interrupt != nullptr && interrupt->load()) break;
      PhaseReport rep;
      rep.open_loop = pt.open;
      rep.concurrency = pt.concurrency;
      rep.request_rate = pt.rate;
      rep.cuda_graphs = graphs;
      rep.label =
          pt.open ? absl::StrCat("rate=", RateText(pt.rate)) : absl::StrCat("c=", pt.concurrency);
      if (graphs >= 0) absl::StrAppend(&rep.label, graphs ? " graphs=on" : " graphs=off");
      if (graphs >= 0) {
        if (absl::Status s = (*conn)->SetCudaGraphs(graphs == 1, kControlTimeoutS); !s.ok()) {
          res.error = absl::StrCat("--compare=cuda_graphs: ", s.message());
          res.exit_code = 1;
          break;
        }
      }
      if (observer.phase_started) observer.phase_started(rep);

      PhaseSettings ps;
      ps.open_loop = pt.open;
      ps.concurrency = pt.concurrency;
      ps.request_rate = pt.rate;
      ps.num_requests = config.num_requests;
      ps.duration_s = config.duration_s;
      ps.min_measure_s = config.min_measure_s;
      ps.warmup_requests = EffectiveWarmup(config, pt.concurrency, config.num_requests);
      ps.request_timeout_s = config.request_timeout_s;
      ps.max_errors = config.max_errors;
      ps.seed = config.seed;
      ps.temperature = static_cast<float>(config.temperature);
      ps.ignore_eos = config.ignore_eos;
      ps.label = rep.label;
      ProgressFn progress;
      if (observer.progress) {
        progress = [&observer, &rep](const Progress& p) { observer.progress(rep, p); };
      }
      rep.outcome = RunPhase(**conn, **workload, ps, progress, interrupt);

      MetricsOptions mo;
      rep.warmup_requests =
          EffectiveWarmup(config, pt.concurrency, static_cast<int64_t>(rep.outcome.records.size()));
      mo.warmup_requests = rep.warmup_requests;
      mo.slo_ttft_ms = config.slo_ttft_ms;
      mo.slo_tpot_ms = config.slo_tpot_ms;
      rep.metrics = ComputeMetrics(rep.outcome.records, mo);
      rep.windows = ServerWindows(**conn, rep.outcome.records, rep.metrics);
      for (const ServerWindow& w : rep.windows) {
        absl::StatusOr<std::string> d = FetchDiagnosis(**conn, w, kControlTimeoutS);
        if (d.ok()) {
          rep.diagnoses.push_back(*d);
        } else if (rep.diagnosis_note.empty()) {
          rep.diagnosis_note = std::string(d.status().message());
        }
      }
      if (rep.windows.empty()) rep.diagnosis_note = "no measured requests, so no window";
      if (observer.phase_finished) observer.phase_finished(rep);
      const std::string stop = rep.outcome.stop_reason;
      const bool interrupted = rep.outcome.interrupted;
      res.phases.push_back(std::move(rep));
      if (interrupted) {
        res.error = "interrupted; the figures cover what was measured until then";
        res.exit_code = 130;
        break;
      }
      if (!stop.empty()) {
        res.error = absl::StrCat("stopped early in phase ", res.phases.back().label, ": ", stop);
        res.exit_code = 1;
        break;
      }
    }
    if (res.exit_code != 0) break;
  }

  if (res.compare) {
    // Put the server back as it was; a failure here only earns a note.
    if (absl::Status s = (*conn)->SetCudaGraphs(graphs_before, kControlTimeoutS); !s.ok()) {
      if (res.error.empty())
        res.error = absl::StrCat("could not restore cuda_graphs: ", s.message());
    }
  }
  if (res.exit_code == 0) {
    const std::string errors = ErrorSummary(res.phases);
    if (!errors.empty()) {
      res.error = errors;
      res.exit_code = 1;
    }
  }
  return res;
}

}  // namespace saturn::clients
