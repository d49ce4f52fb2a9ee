// saturn-diag's subcommands info, get, watch, trace and roofline, the option checks and the
// dispatch (see commands.h). apply is in apply.cc.
#include "clients/diag/commands.h"

#include <chrono>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clients/diag/fleet.h"
#include "clients/diag/render_info.h"
#include "clients/diag/roofline_svg.h"
#include "kernels/base/json_depth.h"
#include "nlohmann/json.hpp"
#include "proto/render/report_json.h"
#include "proto/render/report_text.h"

namespace saturn::clients {
namespace {

std::chrono::system_clock::time_point In(double s) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("-o: cannot write ", path));
  f << text;
  f.close();
  if (!f) return absl::DataLossError(absl::StrCat("-o: error while writing ", path));
  return absl::OkStatus();
}

int Info(const DiagOptions& o, const DiagClient& c, std::ostream& out) {
  const v1::ServerInfo& info = c.info();
  // Servers that predate ServerInfo.calibration still report it with every diagnosis.
  v1::Calibration fallback;
  std::string note;
  const v1::Calibration* cal = info.has_calibration() ? &info.calibration() : nullptr;
  if (cal == nullptr) {
    absl::StatusOr<v1::DiagnosticsReport> r = c.Report(1);
    if (r.ok() && r->has_calibration()) {
      fallback = r->calibration();
      cal = &fallback;
    } else {
      note = r.ok() ? "the server reports none (calibration did not run)"
                    : std::string(r.status().message());
    }
  }
  if (o.json) {
    nlohmann::json j = nlohmann::json::parse(ProtoJson(info, false));
    if (!info.has_calibration() && cal != nullptr) {
      j["calibration"] = nlohmann::json::parse(ProtoJson(*cal, false));
    }
    if (cal == nullptr) j["calibration_note"] = note;
    out << j.dump(2) << "\n";
  } else {
    out << RenderInfo(info, cal, note);
  }
  return kDiagExitOk;
}

int Get(const DiagOptions& o, const DiagClient& c, std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::DiagnosticsReport> r = c.Report(o.window_s);
  if (!r.ok()) return DiagFail(o, r.status(), err);
  if (o.json) {
    out << ReportJson(*r, true) << "\n";
  } else {
    out << absl::StrFormat("%-10s %s, %s on %s, last %.1f s\n", "server", c.target,
                           c.info().model().name(), c.info().backend().device_name(), o.window_s)
        << RenderReport(*r);
  }
  return kDiagExitOk;
}

int Watch(const DiagOptions& o, const DiagClient& c, std::ostream& out, std::ostream& err,
          const std::atomic<bool>* interrupt) {
  v1::WatchDiagnosticsRequest req;
  req.set_window_seconds(o.window_s);
  req.set_interval_ms(o.interval_ms);
  grpc::ClientContext ctx;
  if (o.count > 0) {  // a bounded watch must end even if the server stops sending
    ctx.set_deadline(In(o.timeout_s + o.window_s + 2.0 * o.count * o.interval_ms / 1e3));
  }
  std::unique_ptr<grpc::ClientReader<v1::DiagnosticsReport>> reader =
      c.diag->WatchDiagnostics(&ctx, req);
  v1::DiagnosticsReport r;
  int64_t n = 0;
  while (reader->Read(&r)) {
    ++n;
    if (o.json) {
      out << ReportJson(r, false) << "\n";
    } else {
      const std::string head = absl::StrFormat(
          "saturn-diag watch %s: report %d at %s (window %.1f s, every %d ms%s)\n", c.target, n,
          absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()), o.window_s,
          o.interval_ms, o.tty ? "; Ctrl-C stops" : "");
      // On a terminal: cursor home, clear, redraw. Elsewhere reports follow each other.
      out << (o.tty ? "\033[H\033[2J" : (n > 1 ? "\n" : "")) << head << RenderReport(r);
    }
    out.flush();
    if ((o.count > 0 && n >= o.count) || (interrupt != nullptr && interrupt->load())) {
      ctx.TryCancel();
      break;
    }
  }
  const grpc::Status s = reader->Finish();
  const bool stopped = (o.count > 0 && n >= o.count) || (interrupt != nullptr && interrupt->load());
  if (stopped) return kDiagExitOk;
  if (!s.ok()) return DiagFail(o, c.Error(s, "WatchDiagnostics"), err);
  err << "saturn-diag watch: the server ended the stream after " << n << " reports\n";
  return n > 0 ? kDiagExitOk : kDiagExitFailed;
}

// Recalibrate: the server measures its ceilings again (the engine pauses between two steps).
int Recalibrate(const DiagOptions& o, const DiagClient& c, std::ostream& out, std::ostream& err) {
  v1::RecalibrateRequest req;
  v1::RecalibrateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::max(o.timeout_s, 60.0)));  // measuring takes seconds
  const grpc::Status s = c.diag->Recalibrate(&ctx, req, &resp);
  if (!s.ok()) return DiagFail(o, c.Error(s, "Recalibrate"), err);
  if (o.json) {
    out << ProtoJson(resp, true) << "\n";
    return kDiagExitOk;
  }
  const v1::Calibration& a = resp.previous();
  const v1::Calibration& b = resp.calibration();
  out << absl::StrFormat(
      "recalibrated: GEMM %.1f -> %.1f GFLOP/s, bandwidth %.1f -> %.1f GB/s, "
      "ridge %.2f -> %.2f FLOP/B, in %.0f ms%s\n",
      a.gemm_flops_per_s() / 1e9, b.gemm_flops_per_s() / 1e9, a.bandwidth_bytes_per_s() / 1e9,
      b.bandwidth_bytes_per_s() / 1e9, a.ridge_flops_per_byte(), b.ridge_flops_per_byte(),
      b.calibration_ms(), a.suspect() ? " (the previous one was suspect)" : "");
  out << RenderCalibration(b);
  return kDiagExitOk;
}

int Trace(const DiagOptions& o, const DiagClient& c, std::ostream& out, std::ostream& err) {
  v1::ExportTraceRequest req;
  req.set_max_steps(o.steps);
  v1::ExportTraceResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(o.timeout_s));
  const grpc::Status s = c.diag->ExportTrace(&ctx, req, &resp);
  if (!s.ok()) return DiagFail(o, c.Error(s, "ExportTrace"), err);
  const nlohmann::json j = JsonNestingDepth(resp.trace_json()) <= kMaxFileJsonDepth
                               ? nlohmann::json::parse(resp.trace_json(), nullptr, false)
                               : nlohmann::json(nlohmann::json::value_t::discarded);
  const nlohmann::json* events = nullptr;
  if (j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array()) {
    events = &j["traceEvents"];
  } else if (j.is_array()) {
    events = &j;
  }
  if (events == nullptr) {
    return DiagFail(o,
                    absl::DataLossError(absl::StrCat(
                        "--target ", c.target,
                        ": ExportTrace returned text that is not Chrome trace-event JSON (",
                        resp.trace_json().size(), " bytes); nothing written")),
                    err);
  }
  if (absl::Status w = WriteFile(o.output, resp.trace_json()); !w.ok()) return DiagFail(o, w, err);
  if (o.json) {
    out << nlohmann::json(
               {{"path", o.output}, {"num_steps", resp.num_steps()}, {"events", events->size()}})
               .dump()
        << "\n";
  } else {
    out << "wrote " << o.output << ": " << resp.num_steps() << " steps, " << events->size()
        << " events (open it in https://ui.perfetto.dev or chrome://tracing)\n";
    if (resp.num_steps() == 0) out << "note: the server has run no steps yet; send it requests\n";
  }
  return kDiagExitOk;
}

// The report's whole input, written as the server sent it (engine/diag/recording.h); the
// verdict it gave is printed, and `saturn-diag analyze FILE` judges the file offline.
int Record(const DiagOptions& o, const DiagClient& c, std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::DiagnosticsReport> r = c.Report(o.window_s, 0, /*include_recording=*/true);
  if (!r.ok()) return DiagFail(o, r.status(), err);
  if (r->recording_json().empty()) {
    return DiagFail(o,
                    absl::UnimplementedError(absl::StrCat(
                        "--target ", c.target,
                        ": the server sent no recording (a Saturn older than include_recording)")),
                    err);
  }
  if (absl::Status w = WriteFile(o.output, r->recording_json()); !w.ok()) {
    return DiagFail(o, w, err);
  }
  const double span_s = (r->window_end_us() - r->window_begin_us()) * 1e-6;
  if (o.json) {
    out << nlohmann::json({{"path", o.output},
                           {"bytes", r->recording_json().size()},
                           {"window_s", span_s},
                           {"bottleneck", BottleneckName(r->bottleneck())}})
               .dump()
        << "\n";
  } else {
    out << "wrote " << o.output << ": " << r->recording_json().size() << " bytes, a "
        << absl::StrFormat("%.2f", span_s) << "-s window the server judged "
        << BottleneckName(r->bottleneck()) << " (saturn-diag analyze " << o.output
        << " judges it again offline)\n";
  }
  return kDiagExitOk;
}

int Roofline(const DiagOptions& o, const DiagClient& c, std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::DiagnosticsReport> r = c.Report(o.window_s, o.max_step_points);
  if (!r.ok()) return DiagFail(o, r.status(), err);
  RooflineOptions ro;
  ro.device_fallback = c.info().backend().device_name();
  if (absl::Status w = WriteFile(o.output, RooflineSvg(*r, ro)); !w.ok()) {
    return DiagFail(o, w, err);
  }
  if (o.json) {
    out << nlohmann::json({{"path", o.output},
                           {"bottleneck", BottleneckName(r->bottleneck())},
                           {"classes", r->classes_size()},
                           {"steps", r->step_points_size()}})
               .dump()
        << "\n";
  } else {
    out << "wrote " << o.output << ": roofline of " << ro.device_fallback << ", verdict "
        << BottleneckName(r->bottleneck()) << ", " << r->classes_size() << " op classes, "
        << r->step_points_size() << " steps\n";
  }
  return kDiagExitOk;
}

}  // namespace

absl::Status DiagOptions::Validate() const {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError(m); };
  static const char* kCommands[] = {"info",  "get",         "watch",  "trace",  "roofline",
                                    "apply", "recalibrate", "record", "analyze"};
  if (std::find(std::begin(kCommands), std::end(kCommands), command) == std::end(kCommands)) {
    return bad(absl::StrCat(
        command.empty() ? "no command given" : "unknown command \"" + command + "\"",
        "; expected one of info, get, watch, trace, roofline, apply, recalibrate, record, "
        "analyze"));
  }
  if (target.empty()) return bad("--target: must be host:port");
  if (target.find(',') != std::string::npos && command != "get") {
    return bad(absl::StrCat("--target: a comma-separated list of replicas works with get only; ",
                            command, " takes one host:port"));
  }
  // inf overflowed the deadline into the past: every call failed at once.
  if (!(timeout_s > 0) || timeout_s > 7 * 86400) {
    return bad(absl::StrCat("--timeout: must be in (0, 604800] seconds, got ", timeout_s));
  }
  if (!(window_s > 0) || window_s > 86400) {
    return bad(absl::StrCat("--window: must be in (0, 86400] seconds, got ", window_s));
  }
  if (interval_ms < 100)
    return bad(absl::StrCat("--interval_ms: must be >= 100, got ", interval_ms));
  if (count < 0)
    return bad(absl::StrCat("--count: must be >= 0 (0: until interrupted), got ", count));
  if (steps < 1) return bad(absl::StrCat("--steps: must be >= 1, got ", steps));
  if (max_step_points < 0) {
    return bad(absl::StrCat("--max_step_points: must be >= 0, got ", max_step_points));
  }
  if (!(settle_s >= 0) || settle_s > 86400) {
    return bad(absl::StrCat("--settle: must be in [0, 86400] seconds, got ", settle_s));
  }
  if (absl::Status s = security.Validate(); !s.ok()) return s;
  if ((command == "trace" || command == "roofline" || command == "record") && output.empty()) {
    return bad(absl::StrCat("-o: ", command, " needs an output file (-o FILE.",
                            command == "roofline" ? "svg" : "json", ")"));
  }
  if (command == "analyze" && input.empty()) {
    return bad("analyze: needs a recording file (saturn-diag analyze FILE.json)");
  }
  return absl::OkStatus();
}

absl::StatusOr<DiagClient> DiagClient::Connect(const DiagOptions& o,
                                               std::shared_ptr<const ChannelSecurity> security) {
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      Connection::Connect({o.target}, o.timeout_s, std::move(security));
  if (!conn.ok()) return conn.status();
  DiagClient c;
  c.diag = v1::Diagnostics::NewStub((*conn)->target_channel(0));
  c.conn = *std::move(conn);
  c.target = o.target;
  c.timeout_s = o.timeout_s;
  return c;
}

absl::StatusOr<v1::DiagnosticsReport> DiagClient::Report(double window_s, int max_step_points,
                                                         bool include_recording) const {
  v1::GetDiagnosticsRequest req;
  req.set_window_seconds(window_s);
  req.set_max_step_points(max_step_points);
  req.set_include_recording(include_recording);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(timeout_s));
  v1::DiagnosticsReport r;
  const grpc::Status s = diag->GetDiagnostics(&ctx, req, &r);
  if (!s.ok()) return Error(s, "GetDiagnostics");
  return r;
}

absl::Status DiagClient::Error(const grpc::Status& s, const std::string& call) const {
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return absl::UnimplementedError(absl::StrCat("--target ", target,
                                                 ": the server has no Diagnostics service (", call,
                                                 ": UNIMPLEMENTED: ", s.error_message(), ")"));
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("--target ", target, ": ", call, " failed: ",
                                   GrpcCodeName(s.error_code()), ": ", s.error_message()));
}

int DiagFail(const DiagOptions& o, const absl::Status& s, std::ostream& err) {
  err << "saturn-diag " << (o.command.empty() ? "" : o.command + ": ") << s.message() << std::endl;
  return s.code() == absl::StatusCode::kInvalidArgument ? kDiagExitUsage : kDiagExitFailed;
}

int RunDiagCommand(const DiagOptions& o, std::ostream& out, std::ostream& err,
                   const std::atomic<bool>* interrupt) {
  if (absl::Status s = o.Validate(); !s.ok()) return DiagFail(o, s, err);
  if (o.command == "analyze") {  // no server: clients/offline/analyze.h RunAnalyze judges it
    return DiagFail(o,
                    absl::InvalidArgumentError(
                        "analyze reads a recording, not a server: call RunAnalyze (saturn-diag "
                        "analyze FILE does)"),
                    err);
  }
  absl::StatusOr<std::shared_ptr<const ChannelSecurity>> security =
      ChannelSecurity::Load(o.security);
  if (!security.ok()) return DiagFail(o, security.status(), err);
  if (o.target.find(',') != std::string::npos) return RunFleetGet(o, *security, out, err);
  absl::StatusOr<DiagClient> c = DiagClient::Connect(o, *security);
  if (!c.ok()) return DiagFail(o, c.status(), err);
  if (o.command == "info") return Info(o, *c, out);
  if (o.command == "get") return Get(o, *c, out, err);
  if (o.command == "watch") return Watch(o, *c, out, err, interrupt);
  if (o.command == "trace") return Trace(o, *c, out, err);
  if (o.command == "roofline") return Roofline(o, *c, out, err);
  if (o.command == "recalibrate") return Recalibrate(o, *c, out, err);
  if (o.command == "record") return Record(o, *c, out, err);
  return RunApply(o, *c, out, err, interrupt);
}

}  // namespace saturn::clients
