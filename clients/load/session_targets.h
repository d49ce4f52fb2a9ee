// What one saturn-load run talks to, by --api and --compare (session.h runs the phases):
//   --api grpc              Saturn's gRPC --target carries the load and gives the diagnosis
//   --api openai            the --target URLs carry the load; Saturn's gRPC --diag_target, when
//                           given, the diagnosis and the model limits, else the diagnosis is
//                           skipped (the server may not be Saturn)
//   --compare api           both: each phase once over gRPC (--target) and once over the same
//                           servers' HTTP front (--openai_target); the diagnosis from --target
// Connecting only; no load.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "clients/common/connection.h"
#include "clients/load/config.h"
#include "clients/load/openai_transport.h"
#include "clients/load/transport.h"
#include "clients/load/workload.h"

namespace saturn::clients {

struct RunTargets {
  std::unique_ptr<Connection> saturn;       // Saturn's gRPC (load, diagnosis, ServerInfo); or null
  std::unique_ptr<Transport> grpc;          // the load over gRPC; or null
  std::unique_ptr<OpenAiTransport> openai;  // the load over HTTP; or null
  std::string diagnosis_skipped;            // why no phase gets a diagnosis ("" when they do)
};

// INVALID_ARGUMENT (bad flags or files: exit 2) or the connection's error (exit 1), naming the
// flag and target.
absl::StatusOr<RunTargets> ConnectTargets(const LoadConfig& config);

// The limits the workload is made for: Saturn's ServerInfo when a gRPC connection is there;
// else the HTTP server's context (/v1/models) and, its vocabulary unknown, synthetic ids among
// the byte tokens (`note` says so).
ModelLimits WorkloadLimits(const RunTargets& targets, std::string* note);

}  // namespace saturn::clients
