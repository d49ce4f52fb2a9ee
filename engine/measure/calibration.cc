#include "engine/measure/calibration.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/measure/calibration_fields.h"
#include "engine/measure/calibration_trials.h"
#include "kernels/backend.h"
#include "kernels/base/clock.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/read_file.h"
#include "kernels/base/status_macros.h"

namespace saturn {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Fills a buffer with random values (never time on zeros): a 1 Mi-element random block,
// tiled, so that a 256 MiB buffer costs a copy rather than 64 M random draws.
absl::Status FillRandom(Backend* b, const Tensor& t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> block(std::min<size_t>(n, size_t{1} << 20));
  for (float& x : block) x = u(rng);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; i += block.size()) {
    std::copy_n(block.begin(), std::min(block.size(), n - i), host.begin() + i);
  }
  RETURN_IF_ERROR(b->UploadF32(host.data(), t));
  return b->Synchronize();
}

// A weight matrix [rows, cols] of dtype wdt as the backend stores its GEMM weights
// (Backend::GemmWeightLayout: the CPU's bf16 weights are AMX tiles where AMX runs), so that a
// trial runs the kernel serving runs; its memory in *buf.
absl::StatusOr<Tensor> AllocateWeight(Backend* b, DType wdt, int64_t rows, int64_t cols,
                                      DeviceBuffer* buf) {
  Tensor t{nullptr, wdt, rows, cols, b->GemmWeightLayout(wdt)};
  ASSIGN_OR_RETURN(*buf, b->Allocate(t.bytes()));
  t.data = buf->data();
  return t;
}

// One GEMM [m, k] x [n, k]^T as serving runs it: activations and output in the compute
// dtype, weights in the weight dtype and layout (bf16 weights on a CPU with native bf16 dot
// products take another kernel than f32 ones, with another peak), timed in trials.
absl::StatusOr<TrialSeries> TimeGemm(Backend* b, int64_t m, int64_t k, int64_t n,
                                     const TrialOptions& topt,
                                     std::optional<DType> weight = std::nullopt) {
  const DType dt = b->compute_dtype();
  const DType wdt = weight.value_or(b->weight_dtype());
  ASSIGN_OR_RETURN(DeviceBuffer a, b->Allocate(size_t(m) * k * DTypeSize(dt)));
  DeviceBuffer w;
  ASSIGN_OR_RETURN(const Tensor tw, AllocateWeight(b, wdt, n, k, &w));
  ASSIGN_OR_RETURN(DeviceBuffer o, b->Allocate(size_t(m) * n * DTypeSize(dt)));
  const Tensor ta = a.View(dt, m, k), to = o.View(dt, m, n);
  RETURN_IF_ERROR(FillRandom(b, ta, 1));
  RETURN_IF_ERROR(FillRandom(b, tw, 2));
  return RunTrials(
      [&]() -> absl::Status {
        b->BeginStep(false);
        RETURN_IF_ERROR(b->Gemm(ta, tw, to));
        RETURN_IF_ERROR(b->Synchronize());
        return b->EndStep().status();
      },
      2.0 * double(m) * double(n) * double(k), topt);
}

// One tiny add captured as a graph, the graph replayed back to back with one sync: the best
// time per replay of `repeats` runs (the first run warms up). The graph is released after.
absl::StatusOr<double> GraphLaunchUs(Backend* backend, const CalibrationOptions& opt,
                                     std::string* method) {
  const DType dt = backend->compute_dtype();
  ASSIGN_OR_RETURN(DeviceBuffer x, backend->Allocate(64 * 4));
  const Tensor t = x.View(dt, 1, 16);
  RETURN_IF_ERROR(FillRandom(backend, t, 8));
  backend->BeginStep(false);
  RETURN_IF_ERROR(backend->BeginGraphCapture());
  if (absl::Status s = backend->Add(t, t, t); !s.ok()) {
    (void)backend->AbortGraphCapture();
    (void)backend->EndStep();
    return s;
  }
  absl::StatusOr<int> graph = backend->EndGraphCapture();
  RETURN_IF_ERROR(backend->EndStep().status());
  RETURN_IF_ERROR(graph.status());
  const int launches = opt.quick ? opt.dispatch_ops / 4 : opt.dispatch_ops;
  std::vector<double> per_launch;
  absl::Status run = [&]() -> absl::Status {
    for (int r = 0; r < opt.repeats + 1; ++r) {
      backend->BeginStep(false);
      const double t0 = NowSeconds();
      for (int i = 0; i < launches; ++i) RETURN_IF_ERROR(backend->ReplayGraph(*graph));
      RETURN_IF_ERROR(backend->Synchronize());
      const double total = NowSeconds() - t0;
      RETURN_IF_ERROR(backend->EndStep().status());
      if (r > 0) per_launch.push_back(total / launches * 1e6);
    }
    return absl::OkStatus();
  }();
  const absl::Status released = backend->ReleaseGraph(*graph);
  RETURN_IF_ERROR(run);
  RETURN_IF_ERROR(released);
  absl::StrAppend(method, "; graph launch: a one-add graph replayed ", launches,
                  " times back to back, one sync; time per replay, best of ", opt.repeats,
                  absl::StrFormat(" (median %.2f us)", Median(per_launch)));
  return *std::min_element(per_launch.begin(), per_launch.end());
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(Backend* backend, const CalibrationOptions& opt) {
  // On the host's cores (the CPU backend) the trials are sized for its caches and corrected for
  // other processes; a GPU is not time-shared with the host's other work.
  const Backend::HostCompute host = backend->host_compute();
  const bool on_host = host.threads > 0;
  const DType dt = backend->compute_dtype();
  Calibration c;
  c.backend = backend->name();
  c.device = backend->device_name();
  c.dtype = DTypeName(dt);
  c.measured_unix_s = UnixNowSeconds();
  TrialOptions topt;
  topt.min_trial_s = opt.quick ? opt.min_trial_s / 4 : opt.min_trial_s;
  topt.min_trials = opt.quick ? 2 : opt.min_trials;
  topt.max_trials = opt.quick ? std::max(2, opt.max_trials / 2) : opt.max_trials;
  topt.tolerance = opt.tolerance;
  topt.correct_contention = on_host;
  topt.threads = opt.threads > 0 ? opt.threads
                 : on_host       ? host.threads
                                 : std::max(1, int(std::thread::hardware_concurrency()));
  topt.max_series_s = opt.quick ? 0.3 : 1.0;
  topt.warmup_s = backend->clock_warmup_s();
  double run_share_min = 1;

  // GEMM peak: the square GEMM and the model's own prefill shape; the ceiling is the better.
  const int n = opt.gemm_size > 0 ? opt.gemm_size : (on_host ? (opt.quick ? 512 : 1024) : 8192);
  ASSIGN_OR_RETURN(TrialSeries sq, TimeGemm(backend, n, n, n, topt));
  c.gemm_square_flops_per_s = sq.best;
  c.gemm_flops_per_s = sq.best;
  c.gemm_spread = sq.spread;
  c.stable = sq.stable;
  run_share_min = std::min(run_share_min, sq.run_share);
  const DType wdt = backend->weight_dtype();
  c.gemm_method = absl::StrCat(n, "x", n, "x", n, " ", DTypeName(dt),
                               wdt == dt ? "" : absl::StrCat(" x ", DTypeName(wdt), " weights"),
                               " GEMM through the backend, random data, ", sq.Describe());
  if (opt.model_m > 0 && opt.model_k > 0 && opt.model_n > 0) {
    ASSIGN_OR_RETURN(TrialSeries ms,
                     TimeGemm(backend, opt.model_m, opt.model_k, opt.model_n, topt));
    c.gemm_model_flops_per_s = ms.best;
    c.gemm_model_shape = absl::StrCat(opt.model_m, "x", opt.model_k, "x", opt.model_n);
    c.stable = c.stable && ms.stable;
    run_share_min = std::min(run_share_min, ms.run_share);
    absl::StrAppend(&c.gemm_method, "; model shape ", c.gemm_model_shape,
                    " (MxKxN): ", absl::StrFormat("%.1f GFLOP/s, ", ms.best / 1e9), ms.Describe());
    if (ms.best > c.gemm_flops_per_s) {
      c.gemm_flops_per_s = ms.best;
      c.gemm_spread = ms.spread;
    }
  }

  // The quantized kernel's peak (CPU), which a server quantizing its weights would have.
  if (c.backend == "cpu") {
    if (wdt == DType::kQ8_0) {
      c.q8_0_gemm_flops_per_s = c.gemm_square_flops_per_s;
    } else {
      ASSIGN_OR_RETURN(TrialSeries q8, TimeGemm(backend, n, n, n, topt, DType::kQ8_0));
      c.q8_0_gemm_flops_per_s = q8.best;
      run_share_min = std::min(run_share_min, q8.run_share);
      absl::StrAppend(&c.gemm_method, "; with q8_0 weights ",
                      absl::StrFormat("%.1f GFLOP/s, ", q8.best / 1e9), q8.Describe());
    }
  }

  size_t bytes = opt.copy_bytes > 0 ? opt.copy_bytes : (on_host ? (256u << 20) : (2ull << 30));
  if (opt.quick) bytes /= 4;
  // The q8_0 kernel streaming weights at 1 and 8 input rows (decode steps' shapes, CPU).
  if (c.backend == "cpu") {
    const int64_t k = 1024, row_bytes = static_cast<int64_t>(DTypeRowBytes(DType::kQ8_0, k));
    const int64_t rows = std::max<int64_t>(64, static_cast<int64_t>(bytes) / row_bytes);
    for (const int64_t m : {1, 8}) {
      ASSIGN_OR_RETURN(TrialSeries st, TimeGemm(backend, m, k, rows, topt, DType::kQ8_0));
      const double rate = st.best * double(row_bytes) / (2.0 * double(m) * double(k));
      (m == 1 ? c.q8_0_stream_bytes_per_s : c.q8_0_stream8_bytes_per_s) = rate;
      run_share_min = std::min(run_share_min, st.run_share);
      absl::StrAppend(&c.gemm_method, "; q8_0 stream ", m, "x", k, " x ", rows, "x", k,
                      absl::StrFormat(": %.1f GB/s of weights, ", rate / 1e9), st.Describe());
    }
  }

  // Bandwidth: a read-only weight stream through the backend's GEMM at M = 1 (what a decode
  // step does with all threads), with f32 weights and, where they differ, the backend's own
  // weight dtype (another kernel, with its own prefetch distance: whichever reads faster on
  // this machine sets the ceiling), and a device-to-device copy; the ceiling is the best.
  std::vector<DType> stream_dtypes = {dt};
  if (wdt != dt) stream_dtypes.push_back(wdt);
  for (DType sdt : stream_dtypes) {
    const int64_t k = 1024;
    const size_t row_bytes = DTypeRowBytes(sdt, k);  // q8_0 / q4_0: whole blocks
    const int64_t rows = std::max<int64_t>(64, int64_t(bytes / row_bytes));
    // weights + x + out
    const double moved = double(rows) * row_bytes + double(k + rows) * DTypeSize(dt);
    ASSIGN_OR_RETURN(DeviceBuffer x, backend->Allocate(size_t(k) * DTypeSize(dt)));
    DeviceBuffer w;
    ASSIGN_OR_RETURN(const Tensor tw, AllocateWeight(backend, sdt, rows, k, &w));
    ASSIGN_OR_RETURN(DeviceBuffer o, backend->Allocate(size_t(rows) * DTypeSize(dt)));
    const Tensor tx = x.View(dt, 1, k), to = o.View(dt, 1, rows);
    RETURN_IF_ERROR(FillRandom(backend, tx, 3));
    RETURN_IF_ERROR(FillRandom(backend, tw, 4));
    ASSIGN_OR_RETURN(TrialSeries st, RunTrials(
                                         [&]() -> absl::Status {
                                           backend->BeginStep(false);
                                           RETURN_IF_ERROR(backend->Gemm(tx, tw, to));
                                           RETURN_IF_ERROR(backend->Synchronize());
                                           return backend->EndStep().status();
                                         },
                                         moved, topt));
    c.stable = c.stable && st.stable;
    run_share_min = std::min(run_share_min, st.run_share);
    absl::StrAppend(&c.bandwidth_method, c.bandwidth_method.empty() ? "" : "; ",
                    "read-only weight stream: 1x", k, " x ", rows, "x", k, " ", DTypeName(sdt),
                    " GEMM (", (rows * row_bytes) >> 20, " MiB of weights), bytes read, ",
                    absl::StrFormat("%.1f GB/s, ", st.best / 1e9), st.Describe());
    if (st.best > c.stream_bandwidth_bytes_per_s) {
      c.stream_bandwidth_bytes_per_s = st.best;
      c.bandwidth_bytes_per_s = st.best;
      c.bandwidth_spread = st.spread;
    }
  }
  {
    const int64_t elems = static_cast<int64_t>(bytes / 4);
    ASSIGN_OR_RETURN(DeviceBuffer src, backend->Allocate(bytes));
    ASSIGN_OR_RETURN(DeviceBuffer dst, backend->Allocate(bytes));
    const Tensor ts = src.View(DType::kF32, 1, elems), td = dst.View(DType::kF32, 1, elems);
    RETURN_IF_ERROR(FillRandom(backend, ts, 5));
    RETURN_IF_ERROR(FillRandom(backend, td, 6));
    ASSIGN_OR_RETURN(TrialSeries cp, RunTrials(
                                         [&]() -> absl::Status {
                                           backend->BeginStep(false);
                                           RETURN_IF_ERROR(backend->Copy(ts, td));
                                           RETURN_IF_ERROR(backend->Synchronize());
                                           return backend->EndStep().status();
                                         },
                                         2.0 * double(bytes), topt));
    c.copy_bandwidth_bytes_per_s = cp.best;
    c.stable = c.stable && cp.stable;
    run_share_min = std::min(run_share_min, cp.run_share);
    absl::StrAppend(&c.bandwidth_method, "; ", bytes >> 20,
                    " MiB device-to-device copy, bytes read + written, ",
                    absl::StrFormat("%.1f GB/s, ", cp.best / 1e9), cp.Describe());
    if (cp.best > c.bandwidth_bytes_per_s) {
      c.bandwidth_bytes_per_s = cp.best;
      c.bandwidth_spread = cp.spread;
    }
  }
  c.run_share = run_share_min;
  c.cache_bytes = double(host.cache_bytes);
  const SpecCeilings spec = backend->spec_ceilings();
  c.spec_flops_per_s = spec.flops_per_s;
  c.spec_bandwidth_bytes_per_s = spec.bytes_per_s;
  c.spec_method = spec.method;

  // Per-op dispatch cost: tiny adds back to back.
  {
    ASSIGN_OR_RETURN(DeviceBuffer x, backend->Allocate(64 * 4));
    const Tensor t = x.View(dt, 1, 16);
    RETURN_IF_ERROR(FillRandom(backend, t, 7));
    std::vector<double> per_op, issue;
    const int ops = opt.quick ? opt.dispatch_ops / 4 : opt.dispatch_ops;
    for (int r = 0; r < opt.repeats + 1; ++r) {
      backend->BeginStep(false);
      const double t0 = NowSeconds();
      for (int i = 0; i < ops; ++i) RETURN_IF_ERROR(backend->Add(t, t, t));
      const double t_issue = NowSeconds() - t0;
      RETURN_IF_ERROR(backend->Synchronize());
      const double total = NowSeconds() - t0;
      RETURN_IF_ERROR(backend->EndStep().status());
      if (r > 0) {
        per_op.push_back(total / ops * 1e6);
        issue.push_back(t_issue / ops * 1e6);
      }
    }
    // The smallest, not the median: a tiny op cannot be faster than its dispatch, while a
    // busy machine only ever makes it slower.
    c.op_dispatch_us = *std::min_element(per_op.begin(), per_op.end());
    c.op_issue_us = *std::min_element(issue.begin(), issue.end());
    c.dispatch_method =
        absl::StrCat(ops,
                     " 16-element adds issued back to back, one sync; time per op,"
                     " best of ",
                     opt.repeats, absl::StrFormat(" (median %.2f us)", Median(per_op)));
  }
  if (backend->SupportsGraphs()) {
    ASSIGN_OR_RETURN(c.graph_launch_us, GraphLaunchUs(backend, opt, &c.dispatch_method));
  }
  return c;
}

std::string CalibrationToJson(const Calibration& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const CalibrationField& f : kCalibrationFields) {
    std::visit([&](auto member) { j[f.name] = c.*member; }, f.member);
  }
  j["ridge_flops_per_byte"] = c.ridge_flops_per_byte();  // derived: for readers, never read back
  return j.dump(2);
}

absl::StatusOr<Calibration> CalibrationFromJson(const std::string& text) {
  RETURN_IF_ERROR(CheckJsonDepth(text, kMaxFileJsonDepth, "calibration"));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("calibration: not a JSON object");
  }
  Calibration c;
  const char* field = "";  // the field being read, named in a type error
  try {
    for (const CalibrationField& f : kCalibrationFields) {
      field = f.name;
      auto it = j.find(f.name);
      if (it == j.end()) {
        if (f.required) {
          return absl::InvalidArgumentError(
              absl::StrCat("calibration: required field '", f.name, "' is missing"));
        }
        continue;
      }
      std::visit(
          [&](auto member) {
            using T = std::remove_cvref_t<decltype(c.*member)>;
            c.*member = it->template get<T>();
          },
          f.member);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration: field '", field, "': ", JsonExceptionText(e)));
  }
  if (!j.contains("op_issue_us")) c.op_issue_us = c.op_dispatch_us;  // files before it existed
  if (!(c.gemm_flops_per_s > 0) || !(c.bandwidth_bytes_per_s > 0) || !(c.op_dispatch_us > 0)) {
    return absl::InvalidArgumentError(
        "calibration: gemm_flops_per_s, bandwidth_bytes_per_s and op_dispatch_us must be > 0");
  }
  return c;
}

absl::Status SaveCalibration(const Calibration& c, const std::string& path) {
  std::ofstream f(path);
  if (!f) return absl::InvalidArgumentError(absl::StrCat("calibration: cannot write ", path));
  f << CalibrationToJson(c) << "\n";
  return f.good() ? absl::OkStatus()
                  : absl::DataLossError(absl::StrCat("calibration: write failed: ", path));
}

absl::StatusOr<Calibration> LoadCalibration(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileBounded(path, kMaxConfigFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("calibration: cannot read ", text.status().message()));
  }
  ASSIGN_OR_RETURN(Calibration c, CalibrationFromJson(*text));
  c.source = path;
  return c;
}

}  // namespace saturn
