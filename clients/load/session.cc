// RunSession (see session.h): the order of phases, the CUDA-graphs switching, the API
// comparison's twin phases, and the exit-code policy.
#include "clients/load/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/load/plan_follow.h"
#include "clients/load/session_targets.h"

namespace saturn::clients {
namespace {

constexpr double kControlTimeoutS = 30;

std::string RateText(double r) { return std::isinf(r) ? "inf" : absl::StrCat(r); }

absl::StatusOr<std::unique_ptr<Workload>> BuildWorkload(const LoadConfig& c,
                                                        const ModelLimits& limits) {
  if (!c.prompts.empty()) return LoadJsonlWorkload(c.prompts, c.output_len, limits, c.seed);
  return MakeSyntheticWorkload(c.input_len, c.output_len, limits, c.seed, c.prefix_len);
}

// One run of a sweep point: how it differs from its twin in a comparison.
struct Variant {
  int graphs = -1;  // -1: as the server has it; 0 off; 1 on
  const Transport* transport = nullptr;
  std::string suffix;  // of the label
};

std::vector<Variant> Variants(const LoadConfig& c, const RunTargets& t) {
  if (c.compare == "cuda_graphs") {
    return {{0, t.grpc.get(), " graphs=off"}, {1, t.grpc.get(), " graphs=on"}};
  }
  if (c.compare_api()) {
    return {{-1, t.grpc.get(), " api=grpc"}, {-1, t.openai.get(), " api=openai"}};
  }
  return {{-1, c.openai() ? static_cast<const Transport*>(t.openai.get()) : t.grpc.get(), ""}};
}

// The windows to diagnose for a phase whose load went through the HTTP front: each Saturn
// server's last seconds, back to the first measured send (its answers carry no server clock).
std::vector<ServerWindow> RecentWindows(const Connection& conn, const PhaseReport& rep) {
  std::vector<ServerWindow> out;
  if (rep.metrics.measured == 0) return out;
  const double now_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double last_s = now_unix_s - rep.outcome.start_unix_s - rep.metrics.window_start_s;
  for (size_t i = 0; i < conn.targets().size(); ++i) {
    ServerWindow w;
    w.target_index = i;
    w.peer = conn.targets()[i].target;
    w.last_s = std::max(last_s, 1e-3);
    out.push_back(w);
  }
  return out;
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
  res.compare = !config.compare.empty();
  auto fail = [&res](int code, std::string msg) {
    res.exit_code = code;
    res.error = std::move(msg);
    return res;
  };
  if (absl::Status s = config.Validate(); !s.ok()) return fail(2, std::string(s.message()));

  absl::StatusOr<RunTargets> connected = ConnectTargets(config);
  if (!connected.ok()) {
    return fail(connected.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1,
                std::string(connected.status().message()));
  }
  RunTargets& targets = *connected;
  res.connected = true;
  res.diagnosis_skipped = targets.diagnosis_skipped;
  if (targets.saturn != nullptr) {
    res.targets = targets.saturn->targets();
    res.balanced_uri = targets.saturn->balanced_uri();
    const v1::ServerInfo& info0 = res.targets[0].info;
    for (const TargetInfo& t : res.targets) {
      if (t.info.model().vocab_size() != info0.model().vocab_size()) {
        return fail(
            2, absl::StrCat("--target: ", t.target, " serves a model with vocab_size ",
                            t.info.model().vocab_size(), " but ", res.targets[0].target,
                            " one with ", info0.model().vocab_size(), "; one run needs one model"));
      }
    }
  }
  if (targets.openai != nullptr) {
    for (const HttpTarget& t : targets.openai->targets()) {
      res.http_targets.push_back(
          {t.Url(), targets.openai->model(), targets.openai->max_model_len()});
    }
  }
  std::string limits_note;
  const ModelLimits limits = WorkloadLimits(targets, &limits_note);
  absl::StatusOr<std::unique_ptr<Workload>> workload = BuildWorkload(config, limits);
  if (!workload.ok()) return fail(2, std::string(workload.status().message()));
  res.workload = (*workload)->Describe();
  res.workload_adjustment = (*workload)->Adjustment();
  if (!limits_note.empty() && config.prompts.empty()) {
    res.workload_adjustment = res.workload_adjustment.empty()
                                  ? limits_note
                                  : absl::StrCat(res.workload_adjustment, "; ", limits_note);
  }

  // Graphs: ask for them once before any load, so a server without them costs nothing.
  const bool graphs = config.compare == "cuda_graphs";
  const bool graphs_before = graphs && res.targets[0].info.options().cuda_graphs();
  if (graphs) {
    if (absl::Status s = targets.saturn->SetCudaGraphs(true, kControlTimeoutS); !s.ok()) {
      if (s.code() == absl::StatusCode::kFailedPrecondition) {
        return fail(1, absl::StrCat("--compare=cuda_graphs: this server cannot use CUDA graphs, so "
                                    "there is nothing to compare; nothing was measured (",
                                    s.message(), ")"));
      }
      return fail(1, absl::StrCat("--compare=cuda_graphs: ", s.message()));
    }
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

  // One phase at `pt` (its concurrency may be overridden) through variant `v`.
  auto run_phase = [&](const Point& pt, const Variant& v, int concurrency,
                       const std::string& suffix) {
    PhaseReport rep;
    rep.open_loop = pt.open;
    rep.concurrency = concurrency;
    rep.request_rate = pt.rate;
    rep.cuda_graphs = v.graphs;
    rep.api = v.transport->api();
    rep.target = v.transport->target();
    rep.label = absl::StrCat(
        pt.open ? absl::StrCat("rate=", RateText(pt.rate)) : absl::StrCat("c=", concurrency),
        v.suffix, suffix);
    if (observer.phase_started) observer.phase_started(rep);

    PhaseSettings ps;
    ps.open_loop = pt.open;
    ps.concurrency = concurrency;
    ps.request_rate = pt.rate;
    ps.num_requests = config.num_requests;
    ps.duration_s = config.duration_s;
    ps.min_measure_s = config.min_measure_s;
    ps.warmup_requests = EffectiveWarmup(config, concurrency, config.num_requests);
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
    rep.outcome = RunPhase(*v.transport, **workload, ps, progress, interrupt);

    MetricsOptions mo;
    rep.warmup_requests =
        EffectiveWarmup(config, concurrency, static_cast<int64_t>(rep.outcome.records.size()));
    mo.warmup_requests = rep.warmup_requests;
    mo.slo_ttft_ms = config.slo_ttft_ms;
    mo.slo_tpot_ms = config.slo_tpot_ms;
    rep.metrics = ComputeMetrics(rep.outcome.records, mo);
    if (targets.saturn == nullptr) {
      rep.diagnosis_note = res.diagnosis_skipped;
    } else {
      rep.windows = rep.api == "grpc"
                        ? ServerWindows(*targets.saturn, rep.outcome.records, rep.metrics)
                        : RecentWindows(*targets.saturn, rep);
      for (const ServerWindow& w : rep.windows) {
        absl::StatusOr<std::string> d = FetchDiagnosis(*targets.saturn, w, kControlTimeoutS);
        if (d.ok()) {
          rep.diagnoses.push_back(*d);
        } else if (rep.diagnosis_note.empty()) {
          rep.diagnosis_note = std::string(d.status().message());
        }
      }
      if (rep.windows.empty()) rep.diagnosis_note = "no measured requests, so no window";
    }
    return rep;
  };
  // Keeps a finished phase; false when the run must stop (interrupted, stopped early).
  auto keep = [&](PhaseReport rep) {
    if (observer.phase_finished) observer.phase_finished(rep);
    const std::string stop = rep.outcome.stop_reason;
    const bool interrupted = rep.outcome.interrupted;
    res.phases.push_back(std::move(rep));
    if (interrupted) {
      res.error = "interrupted; the figures cover what was measured until then";
      res.exit_code = 130;
      return false;
    }
    if (!stop.empty()) {
      res.error = absl::StrCat("stopped early in phase ", res.phases.back().label, ": ", stop);
      res.exit_code = 1;
      return false;
    }
    return true;
  };

  // --follow_plan: the last phase's top action, followed once (plan_follow.h). False when the
  // run must stop.
  auto follow = [&](const Point& pt, const Variant& v) {
    PhaseReport& last = res.phases.back();
    if (targets.saturn == nullptr || last.diagnoses.empty()) {
      last.follow_note = "not followed: the phase has no diagnosis";
      return true;
    }
    absl::StatusOr<v1::DiagnosticsReport> before_report = ParseDiagnosis(last.diagnoses[0]);
    absl::StatusOr<std::vector<v1::ServerInfo>> infos =
        targets.saturn->FetchInfos(kControlTimeoutS);
    if (!before_report.ok() || !infos.ok()) {
      last.follow_note =
          absl::StrCat("not followed: ",
                       (!before_report.ok() ? before_report.status() : infos.status()).message());
      return true;
    }
    const v1::EngineOptions before = (*infos)[0].options();
    std::string why;
    const std::optional<FollowStep> step =
        NextFollowStep(*before_report, pt.concurrency, before, &why);
    if (!step.has_value()) {
      last.follow_note = why;
      return true;
    }
    if (!step->change.empty()) {
      absl::StatusOr<v1::EngineOptions> applied =
          targets.saturn->UpdateOptions(step->request, kControlTimeoutS);
      if (!applied.ok()) {
        last.follow_note =
            absl::StrCat("not followed: UpdateEngineOptions failed: ", applied.status().message());
        return true;
      }
    }
    // More clients is a closed loop: an open-loop phase is followed by one at the planned
    // concurrency, as a user following the action would run it.
    Point follow_pt = pt;
    if (pt.open && step->action.kind() == "raise_client_concurrency") {
      follow_pt = Point{false, step->concurrency, 0};
    }
    PhaseReport f = run_phase(follow_pt, v, step->concurrency, " plan");
    std::optional<v1::DiagnosticsReport> after;
    if (!f.diagnoses.empty()) {
      if (absl::StatusOr<v1::DiagnosticsReport> a = ParseDiagnosis(f.diagnoses[0]); a.ok()) {
        after = *std::move(a);
      }
    }
    f.followed = CompareFollowed(*step, after.has_value() ? &*after : nullptr);
    if (!step->change.empty()) {  // the next sweep point starts from the user's options
      absl::StatusOr<v1::EngineOptions> back =
          targets.saturn->UpdateOptions(RestoreRequest(*step, before), kControlTimeoutS);
      if (!back.ok()) {
        f.followed->note = absl::StrCat("could not restore the options: ", back.status().message());
      }
    }
    return keep(std::move(f));
  };

  for (const Point& pt : points) {
    for (const Variant& v : Variants(config, targets)) {
      if (interrupt != nullptr && interrupt->load()) break;
      if (v.graphs >= 0) {
        if (absl::Status s = targets.saturn->SetCudaGraphs(v.graphs == 1, kControlTimeoutS);
            !s.ok()) {
          res.error = absl::StrCat("--compare=cuda_graphs: ", s.message());
          res.exit_code = 1;
          break;
        }
      }
      if (!keep(run_phase(pt, v, pt.concurrency, ""))) break;
      if (config.follow_plan && !(interrupt != nullptr && interrupt->load())) {
        if (!follow(pt, v)) break;
      }
    }
    if (res.exit_code != 0) break;
  }

  if (graphs) {
    // Put the server back as it was; a failure here only earns a note.
    if (absl::Status s = targets.saturn->SetCudaGraphs(graphs_before, kControlTimeoutS); !s.ok()) {
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
