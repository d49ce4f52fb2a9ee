// Calibration: the active backend measures its own ceilings through its own ops, so the
// diagnostics compare achieved FLOP/s and bytes/s with what this machine really does rather
// than a datasheet. Measured once at start (or loaded from a file the user saved).
//  - GEMM peak: a large square GEMM in the compute dtype, median of repeats.
//  - Memory bandwidth: a large device-to-device copy, counting bytes read plus written.
//  - Op dispatch cost: many tiny ops issued back to back, total time / count (the kernel
//    launch cost on CUDA, the dispatch cost on the CPU backend).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace saturn {

struct Calibration {
  std::string backend;
  std::string device;
  std::string dtype;            // precision the GEMM peak was measured in
  double gemm_flops_per_s = 0;  // peak GEMM FLOP/s
  double bandwidth_bytes_per_s = 0;
  double op_dispatch_us = 0;  // wall time per tiny op, issue to completion amortised
  double op_issue_us = 0;     // host time per tiny op issue call
  std::string gemm_method;    // how each was measured, in words
  std::string bandwidth_method;
  std::string dispatch_method;
  std::string source = "measured";  // "measured" or the file it came from
  double ridge_flops_per_byte() const {
    return bandwidth_bytes_per_s > 0 ? gemm_flops_per_s / bandwidth_bytes_per_s : 0;
  }
};

struct CalibrationOptions {
  int gemm_size = 0;      // 0: 1024 on CPU, 8192 on CUDA
  size_t copy_bytes = 0;  // 0: 256 MiB on CPU, 2 GiB on CUDA
  int dispatch_ops = 2000;
  int repeats = 5;
};

// Runs the measurements on `backend` (which must be otherwise idle).
absl::StatusOr<Calibration> Calibrate(Backend* backend, const CalibrationOptions& options = {});

std::string CalibrationToJson(const Calibration& c);
absl::StatusOr<Calibration> CalibrationFromJson(const std::string& json);
absl::Status SaveCalibration(const Calibration& c, const std::string& path);
absl::StatusOr<Calibration> LoadCalibration(const std::string& path);

}  // namespace saturn
