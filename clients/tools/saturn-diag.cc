// saturn-diag: Saturn's live diagnostics from the command line (flags -> DiagOptions ->
// RunDiagCommand). The only file that defines saturn-diag's flags, but for the security flags
// shared with saturn-load (clients/common/security_flags.h). Exit codes: see
// clients/diag/commands.h.
//
//   saturn-diag info
//   saturn-diag get --window 30            saturn-diag get --json
//   saturn-diag get --target a:50051,b:50051   (one verdict per replica and a fleet verdict)
//   saturn-diag watch --interval_ms 2000   saturn-diag watch --count 5 > reports.txt
//   saturn-diag trace -o trace.json        saturn-diag roofline -o roofline.svg
//   saturn-diag apply --settle 20
//   saturn-diag record --window 30 -o run.json   saturn-diag analyze run.json
//   saturn-diag get --target host:50051 --tls_ca ca.pem --auth_token_file token
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/common/security_flags.h"
#include "clients/diag/commands.h"
#include "clients/offline/analyze.h"
#include "kernels/base/flags_help.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server host:port; get also takes a comma-separated list of replicas (fleet view)");
ABSL_FLAG(double, timeout, 10, "Seconds to connect, and for each call");
ABSL_FLAG(bool, json, false, "Print JSON (the report proto's fields) instead of text");
ABSL_FLAG(double, window, 10, "get/watch/roofline/apply: seconds of recent steps to diagnose");
ABSL_FLAG(int, interval_ms, 1000, "watch: milliseconds between reports (>= 100)");
ABSL_FLAG(int64_t, count, 0, "watch: stop after this many reports (0: until Ctrl-C)");
ABSL_FLAG(int, steps, 200, "trace: export the last N steps");
ABSL_FLAG(std::string, o, "", "trace/roofline/record: output file (FILE.json / FILE.svg)");
ABSL_FLAG(double, settle, 10, "apply: seconds to wait after the change before measuring");
ABSL_FLAG(int, max_step_points, 400, "roofline: most steps drawn as dots");
ABSL_FLAG(bool, dry_run, false, "apply: print what would be sent, send nothing");

namespace {

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

constexpr char kUsage[] =
    "Live diagnostics of a Saturn server.\n"
    "usage: saturn-diag <command> [--target host:port] [--json] [flags]\n"
    "       TLS and tokens: --tls_ca, --tls_cert/--tls_key, --tls_server_name,\n"
    "       --auth_token_file (docs/SECURITY.md)\n"
    "  info                 model, backend, options and limits, KV cache, calibration, graphs\n"
    "  get                  one report: verdict, signals, profile, op classes, plan, outcome;\n"
    "                       --target a,b,c: a verdict per replica and a fleet verdict\n"
    "  watch                a report every --interval_ms (--count N to stop)\n"
    "  trace -o FILE.json   the last --steps steps as a Perfetto / Chrome trace\n"
    "  roofline -o FILE.svg the calibrated roofline with this window's op classes and steps\n"
    "  apply                apply the plan's top action, wait --settle s, report the outcome\n"
    "  recalibrate          measure the server's ceilings again (engine paused between steps)\n"
    "  record -o FILE.json  the report's whole input over --window s (steps, engine, calibration)\n"
    "  analyze FILE.json    judge a recording offline, as the server's diagnostics would";

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = saturn::ParseCommandLineWithHelp(argc, argv, kUsage);
  saturn::clients::DiagOptions o;
  const bool analyze = args.size() >= 2 && std::string(args[1]) == "analyze";
  if (args.size() > (analyze ? 3 : 2)) {
    std::cerr << "saturn-diag: unexpected argument \"" << args[2] << "\" (one command at a time)\n"
              << kUsage << std::endl;
    return saturn::clients::kDiagExitUsage;
  }
  if (args.size() < 2) {
    std::cerr << "saturn-diag: no command given\n" << kUsage << std::endl;
    return saturn::clients::kDiagExitUsage;
  }
  o.command = args[1];
  // A flag set for a command that does not use it is refused, not silently dropped.
  const struct {
    const absl::CommandLineFlag& flag;
    std::vector<std::string> commands;
  } scoped[] = {
      {absl::GetFlagReflectionHandle(FLAGS_window),
       {"get", "watch", "roofline", "apply", "record"}},
      {absl::GetFlagReflectionHandle(FLAGS_interval_ms), {"watch"}},
      {absl::GetFlagReflectionHandle(FLAGS_count), {"watch"}},
      {absl::GetFlagReflectionHandle(FLAGS_steps), {"trace"}},
      {absl::GetFlagReflectionHandle(FLAGS_o), {"trace", "roofline", "record"}},
      {absl::GetFlagReflectionHandle(FLAGS_settle), {"apply"}},
      {absl::GetFlagReflectionHandle(FLAGS_max_step_points), {"roofline"}},
      {absl::GetFlagReflectionHandle(FLAGS_dry_run), {"apply"}},
  };
  for (const auto& [flag, commands] : scoped) {
    if (flag.CurrentValue() != flag.DefaultValue() &&
        std::find(commands.begin(), commands.end(), o.command) == commands.end()) {
      std::cerr << "saturn-diag: --" << flag.Name() << " is for " << absl::StrJoin(commands, ", ")
                << ", not " << o.command << std::endl;
      return saturn::clients::kDiagExitUsage;
    }
  }
  o.target = absl::GetFlag(FLAGS_target);
  o.timeout_s = absl::GetFlag(FLAGS_timeout);
  o.json = absl::GetFlag(FLAGS_json);
  o.window_s = absl::GetFlag(FLAGS_window);
  o.interval_ms = absl::GetFlag(FLAGS_interval_ms);
  o.count = absl::GetFlag(FLAGS_count);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.output = absl::GetFlag(FLAGS_o);
  o.settle_s = absl::GetFlag(FLAGS_settle);
  o.max_step_points = absl::GetFlag(FLAGS_max_step_points);
  o.dry_run = absl::GetFlag(FLAGS_dry_run);
  o.tty = isatty(STDOUT_FILENO) != 0;
  o.security = saturn::clients::SecurityFlagsFromCommandLine();
  if (analyze) {  // no server: the recording is judged here
    if (args.size() == 3) o.input = args[2];
    if (absl::Status s = o.Validate(); !s.ok()) {
      std::cerr << "saturn-diag analyze: " << s.message() << std::endl;
      return saturn::clients::kDiagExitUsage;
    }
    return saturn::clients::RunAnalyze(o, std::cout, std::cerr);
  }

  if (o.command == "watch" || o.command == "apply") {
    // Stop at the next report (watch) or cut the settle wait short (apply).
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  }
  return saturn::clients::RunDiagCommand(o, std::cout, std::cerr, &g_interrupted);
}
