#include "clients/offline/analyze.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/diag/diagnostics_session.h"
#include "engine/diag/recording.h"
#include "kernels/base/read_file.h"
#include "nlohmann/json.hpp"
#include "proto/render/report_json.h"
#include "proto/render/report_proto.h"
#include "proto/render/report_text.h"

namespace saturn::clients {

int RunAnalyze(const DiagOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& m) {
    err << "saturn-diag analyze: " << m << std::endl;
    return kDiagExitFailed;
  };
  absl::StatusOr<std::string> text = ReadFileBounded(o.input, kMaxDataFileBytes);
  if (!text.ok()) return fail(absl::StrCat("cannot read ", text.status().message()));
  absl::StatusOr<Recording> rec = RecordingFromJson(*text);
  if (!rec.ok()) return fail(absl::StrCat(o.input, ": ", rec.status().message()));

  DiagnosticsSession session("saturn-diag");
  session.StartOffline(rec->calibration);
  std::vector<StepRecord> steps;
  const DiagnosticsReport report = session.BuildReport(rec->input, &steps);
  ReportProtoOptions po;
  po.nvml_utilization = rec->nvml_percent;
  v1::DiagnosticsReport proto;
  ToProto(report, steps, po, &proto);
  const std::string offline = BottleneckName(report.verdict.bottleneck);
  const std::string top = report.plan.actions.empty() ? "" : report.plan.actions.front().what;
  const bool same =
      rec->bottleneck.empty() || (rec->bottleneck == offline && rec->top_action == top);
  if (o.json) {
    out << nlohmann::json({{"path", o.input},
                           {"device", rec->device},
                           {"recorded_bottleneck", rec->bottleneck},
                           {"recorded_top_action", rec->top_action},
                           {"same_as_recorded", same},
                           {"report", nlohmann::json::parse(ReportJson(proto, false))}})
               .dump(2)
        << "\n";
    return kDiagExitOk;
  }
  const WindowInput& in = rec->input;
  out << absl::StrFormat("%-10s %s (%s), %zu steps, %.2f s window, recorded on %s\n", "recording",
                         o.input, in.context.model.name, in.steps.size(),
                         (in.end_us - in.begin_us) * 1e-6, rec->device)
      << RenderReport(proto);
  if (rec->bottleneck.empty()) return kDiagExitOk;
  if (same) {
    out << "offline: the same verdict and top action as the server's when it recorded this\n";
  } else {
    out << "offline: judged differently from the server's when it recorded this (it said "
        << rec->bottleneck
        << (rec->top_action.empty() ? ", no action" : ", top action \"" + rec->top_action + "\"")
        << "): this build's rules differ from the recording server's\n";
  }
  return kDiagExitOk;
}

}  // namespace saturn::clients
