// saturn-diag get over several replicas (--target a,b,c): one diagnosis per replica, then a
// fleet line that compares them. A replica with requests waiting (or COMPUTE_BOUND) beside
// one that is idle or underloaded means the load balancer spreads unevenly, not that the
// fleet is too small; the line names the replicas and the change that evens the load out.
// When every replica queues, the fleet needs more replicas; when every one is underloaded,
// fewer (or more client concurrency). The rules are listed in fleet.cc.
//
// AnalyzeFleet is pure (tests feed it reports); RunFleetGet talks to the servers.
#pragma once

#include <atomic>
#include <ostream>
#include <string>
#include <vector>

#include "clients/diag/commands.h"
#include "saturn/v1/diagnostics.pb.h"

namespace saturn::clients {

struct ReplicaReport {
  std::string target;
  bool ok = false;
  std::string error;  // why there is no report (unreachable, RPC error)
  std::string model;
  int max_num_seqs = 0;
  v1::DiagnosticsReport report;
};

struct FleetVerdict {
  // BALANCED, IMBALANCED, SATURATED, UNDERLOADED, or INCOMPLETE (fewer than two replicas
  // answered).
  std::string kind;
  std::string why;        // one sentence with the figures that decided it
  std::string action;     // what to change (empty when nothing)
  double load_ratio = 0;  // busiest replica's in-flight requests over the least busy one's
};

// In-flight requests of a replica over the window: mean running + mean waiting.
double ReplicaLoad(const v1::DiagnosticsReport& r);
// Whether requests waited on the replica (or it runs at its compute ceiling).
bool ReplicaSaturated(const v1::DiagnosticsReport& r);

FleetVerdict AnalyzeFleet(const std::vector<ReplicaReport>& replicas);

// The per-replica table and the fleet lines.
std::string RenderFleet(const std::vector<ReplicaReport>& replicas, const FleetVerdict& v,
                        double window_s);
// JSON: {"window_seconds", "replicas": [{target, ok, error, report}], "fleet": {...}}.
std::string FleetJson(const std::vector<ReplicaReport>& replicas, const FleetVerdict& v,
                      double window_s);

// `get` for o.target = "a,b,c": exit 0 when every replica answered, 1 otherwise (the others
// are still reported).
int RunFleetGet(const DiagOptions& o, const std::shared_ptr<const ChannelSecurity>& security,
                std::ostream& out, std::ostream& err);

}  // namespace saturn::clients
