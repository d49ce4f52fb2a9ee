// Every stored field of Calibration, named once: CalibrationToJson and CalibrationFromJson
// (calibration.cc) and the server's ToProto (proto/render/report_proto.cc) walk this table, and the
// JSON keys and v1.Calibration's field names are these names. Fields not here are derived
// (ridge_flops_per_byte) or not stored in a file (source).
#pragma once

#include <string>
#include <variant>

#include "engine/measure/calibration.h"

namespace saturn {

struct CalibrationField {
  const char* name;
  std::variant<std::string Calibration::*, double Calibration::*, bool Calibration::*> member;
  bool required;  // a file without it is refused; others read as Calibration's defaults
};

inline constexpr CalibrationField kCalibrationFields[] = {
    {"backend", &Calibration::backend, true},
    {"device", &Calibration::device, true},
    {"dtype", &Calibration::dtype, true},
    {"gemm_flops_per_s", &Calibration::gemm_flops_per_s, true},
    {"bandwidth_bytes_per_s", &Calibration::bandwidth_bytes_per_s, true},
    {"op_dispatch_us", &Calibration::op_dispatch_us, true},
    {"op_issue_us", &Calibration::op_issue_us, false},  // absent: op_dispatch_us
    {"graph_launch_us", &Calibration::graph_launch_us, false},
    {"gemm_method", &Calibration::gemm_method, false},
    {"bandwidth_method", &Calibration::bandwidth_method, false},
    {"dispatch_method", &Calibration::dispatch_method, false},
    {"gemm_square_flops_per_s", &Calibration::gemm_square_flops_per_s, false},
    {"gemm_model_flops_per_s", &Calibration::gemm_model_flops_per_s, false},
    {"gemm_model_shape", &Calibration::gemm_model_shape, false},
    {"stream_bandwidth_bytes_per_s", &Calibration::stream_bandwidth_bytes_per_s, false},
    {"copy_bandwidth_bytes_per_s", &Calibration::copy_bandwidth_bytes_per_s, false},
    {"gemm_spread", &Calibration::gemm_spread, false},
    {"bandwidth_spread", &Calibration::bandwidth_spread, false},
    {"stable", &Calibration::stable, false},
    {"run_share", &Calibration::run_share, false},
    {"cache_bytes", &Calibration::cache_bytes, false},
    {"spec_flops_per_s", &Calibration::spec_flops_per_s, false},
    {"spec_bandwidth_bytes_per_s", &Calibration::spec_bandwidth_bytes_per_s, false},
    {"spec_method", &Calibration::spec_method, false},
    {"measured_unix_s", &Calibration::measured_unix_s, false},
    {"q8_0_gemm_flops_per_s", &Calibration::q8_0_gemm_flops_per_s, false},
    {"q8_0_stream_bytes_per_s", &Calibration::q8_0_stream_bytes_per_s, false},
    {"q8_0_stream8_bytes_per_s", &Calibration::q8_0_stream8_bytes_per_s, false},
    {"allreduce_latency_us", &Calibration::allreduce_latency_us, false},
    {"allreduce_bytes_per_s", &Calibration::allreduce_bytes_per_s, false},
    {"allreduce_method", &Calibration::allreduce_method, false},
};

}  // namespace saturn
