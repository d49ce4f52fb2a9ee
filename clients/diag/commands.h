// saturn-diag's subcommands, each a function of the parsed options that talks to one server
// and writes its result to `out` (reports, or JSON with --json) and its complaints to `err`:
//
//   info      GetServerInfo: model, backend and device, options and limits, KV capacity,
//             calibration, CUDA graphs
//   get       GetDiagnostics: one report over --window seconds; with --target a,b,c one
//             report per replica and a fleet verdict (fleet.h)
//   watch     WatchDiagnostics: a report every --interval_ms; on a terminal the screen is
//             cleared and redrawn, otherwise reports follow each other; --count N stops
//   trace     ExportTrace of the last --steps steps, checked to parse, written to -o FILE.json
//   roofline  the calibrated roofline with the window's op classes and steps, -o FILE.svg
//   recalibrate  Recalibrate: the server measures its ceilings again (engine paused between
//             two steps); prints old and new ceilings
//   apply     UpdateEngineOptions with the top plan action's options, wait --settle seconds,
//             then print measured vs predicted (apply.cc)
//   record    GetDiagnostics with include_recording: the report's whole input (step records,
//             engine state, calibration) over --window seconds, written to -o FILE.json
//   analyze   judges such a file offline with the server's own diagnostics session; it links
//             the engine's analyzer, so it lives apart (clients/offline/analyze.h) and
//             RunDiagCommand only checks its options
//
// Exit codes: 0 done (also: apply with no server-side action to take); 1 the target or the
// server failed (unreachable, an RPC error, a file that cannot be written); 2 bad flags.
// Flags live in clients/tools/saturn-diag.cc; this file never reads them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clients/common/channel_security.h"
#include "clients/common/connection.h"
#include "saturn/v1/diagnostics.grpc.pb.h"

namespace saturn::clients {

inline constexpr int kDiagExitOk = 0;
inline constexpr int kDiagExitFailed = 1;
inline constexpr int kDiagExitUsage = 2;

struct DiagOptions {
  std::string command;  // info | get | watch | trace | roofline | apply | recalibrate | record
                        // | analyze
  std::string target = "127.0.0.1:50051";
  double timeout_s = 10;  // connecting, and each call
  bool json = false;
  double window_s = 10;           // get, watch, roofline, apply
  int interval_ms = 1000;         // watch
  int64_t count = 0;              // watch: stop after this many reports (0: until interrupted)
  int steps = 200;                // trace
  std::string output;             // trace, roofline, record
  std::string input;              // analyze: the recording
  double settle_s = 10;           // apply
  int max_step_points = 400;      // roofline
  bool dry_run = false;           // apply: say what would be sent, send nothing
  bool tty = false;               // watch: `out` is a terminal (clear and redraw)
  ChannelSecurityFlags security;  // TLS, client certificate, bearer token (every command)

  // Names the flag and the limit it broke.
  absl::Status Validate() const;
};

// Runs o.command. `interrupt` (may be null) stops watch and apply's wait early.
int RunDiagCommand(const DiagOptions& o, std::ostream& out, std::ostream& err,
                   const std::atomic<bool>* interrupt = nullptr);

// One server's Saturn and Diagnostics stubs (shared by the subcommand files).
struct DiagClient {
  std::unique_ptr<Connection> conn;
  std::unique_ptr<v1::Diagnostics::Stub> diag;
  std::string target;
  double timeout_s = 10;

  static absl::StatusOr<DiagClient> Connect(const DiagOptions& o,
                                            std::shared_ptr<const ChannelSecurity> security);
  const v1::ServerInfo& info() const { return conn->targets()[0].info; }
  // GetDiagnostics over the last `window_s` seconds (with its recording: include_recording).
  absl::StatusOr<v1::DiagnosticsReport> Report(double window_s, int max_step_points = 0,
                                               bool include_recording = false) const;
  // A gRPC failure as a Status naming the target and the call; UNIMPLEMENTED says the server
  // has no Diagnostics service.
  absl::Status Error(const grpc::Status& s, const std::string& call) const;
};

int RunApply(const DiagOptions& o, const DiagClient& client, std::ostream& out, std::ostream& err,
             const std::atomic<bool>* interrupt);

// "saturn-diag <command>: <message>" on `err`; the exit code for the status: 2 for
// INVALID_ARGUMENT (a flag value, ours or one the server rejected), else 1.
int DiagFail(const DiagOptions& o, const absl::Status& s, std::ostream& err);

}  // namespace saturn::clients
