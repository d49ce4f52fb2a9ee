// How a saturn-load run is shown and saved: the end-of-run table (one block per phase, a
// sweep summary, the CUDA-graphs or gRPC-vs-HTTP comparison with ratios), the JSON and CSV
// files (every figure the table shows, plus the settings and per-request records), and the
// progress display (a bar on a terminal, plain lines otherwise). Formatting only: never talks to a
// server, never decides an exit code.
//
// Every number the table prints is printed with "%.2f" (or as an integer) from a field that
// the JSON holds under the same meaning, so a figure read off the table can be found in the
// file.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "clients/load/session.h"
#include "nlohmann/json.hpp"

namespace saturn::clients {

// One line of a comparison: graphs off / on, or gRPC (off) / HTTP (on) for --compare api.
// ratio = on / off (0 when off is 0).
struct CompareRow {
  std::string name;
  double off = 0, on = 0, ratio = 0;
};
std::vector<CompareRow> CompareRows(const PhaseReport& off, const PhaseReport& on);

// --compare api: a point's gRPC phase and its HTTP twin (same point, gRPC first), and the two
// figures the comparison is for, HTTP / gRPC (0 when the gRPC figure is 0).
bool IsApiPair(const PhaseReport& grpc, const PhaseReport& http);
struct ApiRatios {
  double tpot_p50 = 0;
  double output_throughput = 0;
};
ApiRatios ApiCompareRatios(const PhaseReport& grpc, const PhaseReport& http);

std::string FormatTable(const SessionResult& result);
// The table's last section, "== in plain words ==": the verdict on the most loaded phase
// with a diagnosis, why, what to change and the predicted gain (run_conclusion.cc).
std::string PlainConclusion(const SessionResult& result);

nlohmann::json SessionToJson(const SessionResult& result);
absl::Status WriteJson(const SessionResult& result, const std::string& path);
// One row per phase: settings, counts, throughput, goodput, every latency statistic.
std::string FormatCsv(const SessionResult& result);
absl::Status WriteCsv(const SessionResult& result, const std::string& path);

// Progress of the running phase. On a terminal, one bar redrawn in place; otherwise one
// plain line every `plain_every_s` seconds and one at each phase's end.
class ProgressPrinter {
 public:
  ProgressPrinter(FILE* out, bool tty, const LoadConfig& config, double plain_every_s = 5);
  void PhaseStarted(const PhaseReport& phase);
  void Update(const PhaseReport& phase, const Progress& p);
  void PhaseFinished(const PhaseReport& phase);

 private:
  std::string Line(const PhaseReport& phase, const Progress& p) const;
  FILE* out_;
  bool tty_;
  int64_t num_requests_;
  double duration_s_;
  double plain_every_s_;
  double next_plain_s_ = 0;
  Progress last_;
};

}  // namespace saturn::clients
