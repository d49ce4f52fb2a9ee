// Calibration: the active backend measures its own ceilings through its own ops, so the
// diagnostics compare achieved FLOP/s and bytes/s with what this machine really does rather
// than a datasheet. Measured at start and on Recalibrate (or loaded from a file the user saved),
// through Engine::Calibrate, which runs it on the engine thread between two steps. Depends on
// the Backend alone, so the engine library holds it; the diagnostics (engine/diag/) read it.
// Each ceiling is a series of trials (calibration_trials.h: best-of-N, stability criterion,
// contention correction on the CPU backend), the spread reported beside it:
//  - GEMM peak: the best of a large square GEMM and a GEMM at the model's own prefill shape,
//    in the compute dtype.
//  - Memory bandwidth: the best of read-only weight streams through the backend's GEMM at
//    M = 1 (what a decode step does, all threads; f32 weights and the backend's weight dtype)
//    and a device-to-device copy (bytes read plus written).
//  - Op dispatch cost: many tiny ops issued back to back, total time / count (the kernel
//    launch cost on CUDA, the dispatch cost on the CPU backend); where the backend has graphs,
//    the cost of one graph launch the same way.
//  - Clocks that idle low (a GPU's) are warmed before the timed trials
//    (Backend::clock_warmup_s).
//  - On CUDA, the datasheet-style ceilings from the device's properties beside them.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace saturn {

class Backend;

struct Calibration {
  std::string backend;
  std::string device;
  std::string dtype;            // precision the GEMM peak was measured in
  double gemm_flops_per_s = 0;  // peak GEMM FLOP/s
  double bandwidth_bytes_per_s = 0;
  double op_dispatch_us = 0;  // wall time per tiny op, issue to completion amortised
  double op_issue_us = 0;     // host time per tiny op issue call
  // Wall time per graph replay (a captured one-op graph launched back to back, issue to
  // completion amortised): what a replayed step pays once instead of op_dispatch_us per op.
  // 0 where the backend has no graphs (and in files written before it existed).
  double graph_launch_us = 0;
  std::string gemm_method;  // how each was measured, in words
  std::string bandwidth_method;
  std::string dispatch_method;
  std::string source = "measured";  // "measured" or the file it came from
  // How the ceilings above were reached (0 / empty in files written before these existed).
  double gemm_square_flops_per_s = 0;            // the square GEMM alone
  double gemm_model_flops_per_s = 0;             // GEMM at the model's prefill shape
  std::string gemm_model_shape;                  // "MxKxN"
  double stream_bandwidth_bytes_per_s = 0;       // read-only weight stream (GEMM, M = 1)
  double copy_bandwidth_bytes_per_s = 0;         // device-to-device copy, read + written
  double gemm_spread = 0, bandwidth_spread = 0;  // (best - median) / best of the trials
  bool stable = true;                            // every series met its stability criterion
  double run_share = 1;    // share of runnable time the threads ran (1: no contention seen)
  double cache_bytes = 0;  // last-level cache: working sets under it run from cache
  // Datasheet ceilings from the device's properties (CUDA; 0 where unknown).
  double spec_flops_per_s = 0, spec_bandwidth_bytes_per_s = 0;
  std::string spec_method;
  double measured_unix_s = 0;  // when measured (wall clock, seconds since the epoch)
  // The square GEMM with q8_0 weights where the backend has the kernel (CPU; 0 elsewhere and in
  // files written before it existed): the plan's quantize_weights predicts against it.
  double q8_0_gemm_flops_per_s = 0;
  // The q8_0 GEMM at 1 and 8 input rows over a weight stream as large as the bandwidth one:
  // weight bytes per second (CPU; 0 elsewhere and in older files). A decode step of B rows
  // then takes bytes x (1/r1 + (1/r8 - 1/r1)(B - 1)/7) for its q8_0 GEMMs.
  double q8_0_stream_bytes_per_s = 0, q8_0_stream8_bytes_per_s = 0;
  // Tensor parallelism: the group's all-reduce at the model's message sizes, fitted as
  // latency + bus bytes / bandwidth (bus bytes: 2 (n - 1) / n of the message, op_cost.h); 0
  // without a group (and in older files). allreduce_method says how, over what transport.
  double allreduce_latency_us = 0, allreduce_bytes_per_s = 0;
  std::string allreduce_method;
  // The fitted time of one all-reduce moving `bus_bytes` (0 where not calibrated).
  double AllReduceUs(double bus_bytes) const {
    return allreduce_bytes_per_s > 0
               ? allreduce_latency_us + bus_bytes / allreduce_bytes_per_s * 1e6
               : 0;
  }
  double ridge_flops_per_byte() const {
    return bandwidth_bytes_per_s > 0 ? gemm_flops_per_s / bandwidth_bytes_per_s : 0;
  }
};

struct CalibrationOptions {
  int gemm_size = 0;      // 0: 1024 on CPU, 8192 on CUDA
  size_t copy_bytes = 0;  // 0: 256 MiB on CPU, 2 GiB on CUDA (also the weight stream's size)
  int dispatch_ops = 2000;
  int repeats = 5;  // dispatch measurement: median of this many
  // The model's GEMM shape (prefill chunk rows M, hidden K, intermediate N); 0: none.
  int model_m = 0, model_k = 0, model_n = 0;
  // Trials per ceiling (calibration_trials.h); the defaults take about 1-2 s on 2 CPU cores.
  double min_trial_s = 0.04;
  int min_trials = 3;
  int max_trials = 8;
  double tolerance = 0.05;
  // Cheaper: quarter-size buffers, shorter trials (tests that start many servers).
  bool quick = false;
  // Threads the backend runs an op on (contention correction); 0: the "(N threads)" in the
  // CPU backend's device name, else the machine's hardware threads.
  int threads = 0;
};

// Runs the measurements on `backend` (which must be otherwise idle: a served engine's backend
// is reached through Engine::Calibrate only).
absl::StatusOr<Calibration> Calibrate(Backend* backend, const CalibrationOptions& options = {});

std::string CalibrationToJson(const Calibration& c);
absl::StatusOr<Calibration> CalibrationFromJson(const std::string& text);
absl::Status SaveCalibration(const Calibration& c, const std::string& path);
absl::StatusOr<Calibration> LoadCalibration(const std::string& path);

}  // namespace saturn
