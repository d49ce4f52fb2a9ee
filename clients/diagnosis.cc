// FetchDiagnosis and the stored JSON form of a report (see diagnosis.h).
#include "clients/diagnosis.h"

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clients/diag_render.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
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
  req.set_window_begin_us(static_cast<double>(window.start_us));
  // The server wants begin < end; a one-request window of zero length still gets its step.
  req.set_window_end_us(static_cast<double>(std::max(window.end_us, window.start_us + 1)));
  req.set_include_json(true);
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

std::string DiagnosisJson(const v1::DiagnosticsReport& report) {
  v1::DiagnosticsReport lean = report;
  lean.clear_json();
  nlohmann::json j = nlohmann::json::parse(ProtoJson(lean, false), nullptr, false);
  if (j.is_discarded()) j = nlohmann::json::object();
  j.erase("json");  // printed as "" with the defaults; the parsed report goes under "report"
  if (!report.json().empty()) {
    nlohmann::json full = nlohmann::json::parse(report.json(), nullptr, false);
    j["report"] = full.is_discarded() ? nlohmann::json(report.json()) : full;
  }
  return j.dump();
}

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

}  // namespace saturn::clients
