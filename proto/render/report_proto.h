// DiagnosticsReport (engine/diag/analyzer.h) -> saturn.v1.DiagnosticsReport, the one schema
// of a report (every fact of the analyzer's report has a field there), plus the calibration
// and CUDA-graph parts of ServerInfo. The report's `text` and `json` are the renderings of
// the proto (proto/render/). Pure functions, thread-safe.
#pragma once

#include <vector>

#include "engine/diag/analyzer.h"
#include "engine/engine_info.h"
#include "engine/measure/step_record.h"
#include "saturn/v1/diagnostics.pb.h"
#include "saturn/v1/saturn.pb.h"

namespace saturn {

struct ReportProtoOptions {
  bool include_json = false;     // fill `json` with ReportJson (proto/render/report_json.h)
  int max_step_points = 0;       // fill `step_points` with up to this many of `steps`
  double nvml_utilization = -1;  // percent over the window (-1: none)
};

v1::Bottleneck ToProto(Bottleneck b);
void ToProto(const Calibration& c, double calibration_ms, v1::Calibration* out);
void ToProto(const GraphInfo& g, v1::CudaGraphInfo* out);
// `steps`: the window's steps (for step points); the text rendering is always filled.
void ToProto(const DiagnosticsReport& r, const std::vector<StepRecord>& steps,
             const ReportProtoOptions& options, v1::DiagnosticsReport* out);
// The report alone (no step points, no `json`, NVML unknown): for the tests and benchmarks
// that render an analyzer's report.
v1::DiagnosticsReport ToProto(const DiagnosticsReport& r);

}  // namespace saturn
