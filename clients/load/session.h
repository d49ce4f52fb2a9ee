// A whole saturn-load run: connect (session_targets.h), build the workload, run one phase per
// sweep point (and, with --compare=cuda_graphs, each point twice: graphs off, then on; with
// --compare=api, each point over gRPC, then over the OpenAI HTTP front, same workload and
// seeds; with --follow_plan, each point's top plan action applied and the point run again),
// compute each phase's figures, ask for the server's diagnosis of each phase's window
// (skipped, with one line saying why, for --api openai without --diag_target), and decide the
// exit code. Printing and files are run_table.h's job; this file never writes to stdout or
// files.
//
// Exit codes: 0 every request completed; 1 the run could not be done as asked or requests
// failed (unreachable target, rejected requests, a server without CUDA graphs for
// --compare); 2 bad flags or input files; 130 interrupted. Whatever was measured before a
// failure is still in the result, so the reports can be written.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "clients/common/stats.h"
#include "clients/load/config.h"
#include "clients/load/diagnosis.h"
#include "clients/load/plan_follow.h"
#include "clients/load/runner.h"

namespace saturn::clients {

struct PhaseReport {
  std::string label;         // e.g. "c=4", "rate=2", "c=4 graphs=on", "c=4 api=openai"
  std::string api = "grpc";  // the API the phase drove ("grpc" or "openai")
  std::string target;        // and where (host:port or URLs, comma-separated)
  bool open_loop = false;
  int concurrency = 0;      // closed loop
  double request_rate = 0;  // open loop
  int cuda_graphs = -1;     // -1: left as the server had it; 0 off; 1 on
  int warmup_requests = 0;  // the count the warm-up rule used
  RunMetrics metrics;
  PhaseOutcome outcome;
  std::vector<ServerWindow> windows;   // one per server that served measured requests
  std::vector<std::string> diagnoses;  // JSON text per window, when available
  std::string diagnosis_note;          // why there is none
  // --follow_plan: on a phase run to follow the previous one's top action, the prediction
  // against what it measured; on the previous one, why it was not followed ("": it was).
  std::optional<FollowedPlan> followed;
  std::string follow_note;
};

// An OpenAI-compatible server the run drove.
struct HttpTargetReport {
  std::string url;
  std::string model;      // the model asked for
  int max_model_len = 0;  // as GET /v1/models gave it (0: not given)
};

struct SessionResult {
  LoadConfig config;
  bool connected = false;  // the run got as far as connecting (then the reports are written)
  std::string workload;
  std::string workload_adjustment;  // Workload::Adjustment(): lengths changed to fit, and why
  std::string balanced_uri;
  std::vector<TargetInfo> targets;             // Saturn's gRPC servers (load or diagnosis)
  std::vector<HttpTargetReport> http_targets;  // the OpenAI-compatible servers
  std::string diagnosis_skipped;               // why no phase has a diagnosis ("": none skipped)
  std::vector<PhaseReport> phases;
  bool compare = false;  // --compare cuda_graphs or api: phases come in pairs
  std::string error;     // what went wrong, "" when nothing did
  int exit_code = 0;
};

// Called at each phase's start (label) and with its progress.
struct SessionObserver {
  std::function<void(const PhaseReport&)> phase_started;
  std::function<void(const PhaseReport&, const Progress&)> progress;
  std::function<void(const PhaseReport&)> phase_finished;
};

SessionResult RunSession(const LoadConfig& config, const SessionObserver& observer,
                         const std::atomic<bool>* interrupt);

// The per-server windows of a phase's measured requests (exposed for tests).
std::vector<ServerWindow> ServerWindows(const Connection& conn,
                                        const std::vector<RequestRecord>& records,
                                        const RunMetrics& metrics);

}  // namespace saturn::clients
