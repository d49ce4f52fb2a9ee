// FetchDiagnosis, the stored JSON form of a report and its short rendering (see
// diagnosis.h).
#include "clients/load/diagnosis.h"

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "proto/render/report_json.h"
#include "proto/render/report_text.h"
#include "saturn/v1/diagnostics.grpc.pb.h"

namespace saturn::clients {

absl::StatusOr<std::string> FetchDiagnosis(const Connection& conn, const ServerWindow& window,
                                           double timeout_s) {
  if (window.target_index >= conn.targets().size()) {
    return absl::InvalidArgumentError("the window names no known target");
  }
  const std::string& target = conn.targets()[window.target_index].target;
  std::unique_ptr<v1::Diagnostics::Stub> stub =
      v1::Diagnostics::NewStub(conn.target_channel(window.target_index));
  v1::GetDiagnosticsRequest req;
  if (window.last_s > 0) {
    req.set_window_seconds(window.last_s);
  } else {
    req.set_window_begin_us(static_cast<double>(window.start_us));
    // The server wants begin < end; a one-request window of zero length still gets its step.
    req.set_window_end_us(static_cast<double>(std::max(window.end_us, window.start_us + 1)));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  v1::DiagnosticsReport report;
  const grpc::Status s = stub->GetDiagnostics(&ctx, req, &report);
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return absl::UnimplementedError(absl::StrCat(
        "--target ", target, " has no Diagnostics service (UNIMPLEMENTED): ", s.error_message()));
  }
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("--target ", target, ": GetDiagnostics failed: ",
                                     GrpcCodeName(s.error_code()), ": ", s.error_message()));
  }
  return DiagnosisJson(report);
}

std::string DiagnosisJson(const v1::DiagnosticsReport& report) { return ReportJson(report, false); }

absl::StatusOr<v1::DiagnosticsReport> ParseDiagnosis(const std::string& json) {
  v1::DiagnosticsReport r;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;
  const auto s = google::protobuf::util::JsonStringToMessage(json, &r, o);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("not a diagnostics report: ", s.ToString()));
  }
  return r;
}

std::vector<std::string> ShortDiagnosis(const v1::DiagnosticsReport& r) {
  const v1::Profile& p = r.profile();
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat(
      "%s (steps %s) over %d steps in %.2f s; busy %.2f, MFU %.2f, MBU %.2f, batch %.2f",
      BottleneckName(r.bottleneck()), BottleneckName(r.step_bound()), p.steps(), p.window_s(),
      p.busy_fraction(), p.mfu(), p.mbu(), p.mean_batch_seqs()));
  std::vector<std::string> crossed;
  for (const v1::Signal& s : r.signals()) {
    if (s.crossed()) {
      crossed.push_back(
          absl::StrFormat("%s %.2f (threshold %.2f)", s.name(), s.value(), s.threshold()));
    }
  }
  lines.push_back(
      absl::StrCat("signals: ", crossed.empty() ? "none crossed" : absl::StrJoin(crossed, "; ")));
  if (r.plan().empty()) {
    // The note is free text; its numbers are not JSON figures, so a note with digits is
    // left to the JSON file.
    const bool digits = r.plan_note().find_first_of("0123456789") != std::string::npos;
    lines.push_back(absl::StrCat("plan: no action", r.plan_note().empty() ? ""
                                                    : digits              ? " (why: see the JSON)"
                                                             : absl::StrCat(": ", r.plan_note())));
  } else {
    const v1::PlanAction& a = r.plan(0);
    if (!a.untrusted().empty()) {
      lines.push_back(absl::StrFormat("plan: %s: %.2f tok/s now, no trusted prediction%s", a.what(),
                                      a.tokens_per_s_before(),
                                      r.plan_size() > 1 ? " (more in JSON)" : " (why: JSON)"));
      return lines;
    }
    lines.push_back(absl::StrFormat("plan: %s: %.2f -> %.2f tok/s, TPOT %.2f -> %.2f ms%s",
                                    a.what(), a.tokens_per_s_before(), a.tokens_per_s_after(),
                                    a.tpot_ms_before(), a.tpot_ms_after(),
                                    r.plan_size() > 1 ? " (more in JSON)" : ""));
  }
  return lines;
}

}  // namespace saturn::clients
