#include "engine/diag/calibration.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace saturn {
namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Fills a buffer with random values (never time on zeros).
absl::Status FillRandom(Backend* b, const Tensor& t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> host(static_cast<size_t>(t.numel()));
  for (float& x : host) x = u(rng);
  RETURN_IF_ERROR(b->UploadF32(host.data(), t));
  return b->Synchronize();
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(Backend* backend, const CalibrationOptions& opt) {
  const bool cpu = backend->name() == "cpu";
  const DType dt = backend->compute_dtype();
  Calibration c;
  c.backend = backend->name();
  c.device = backend->device_name();
  c.dtype = DTypeName(dt);

  // GEMM peak.
  const int n = opt.gemm_size > 0 ? opt.gemm_size : (cpu ? 1024 : 8192);
  {
    ASSIGN_OR_RETURN(DeviceBuffer a, backend->Allocate(size_t(n) * n * DTypeSize(dt)));
    ASSIGN_OR_RETURN(DeviceBuffer w, backend->Allocate(size_t(n) * n * DTypeSize(dt)));
    ASSIGN_OR_RETURN(DeviceBuffer o, backend->Allocate(size_t(n) * n * DTypeSize(dt)));
    const Tensor ta = a.View(dt, n, n), tw = w.View(dt, n, n), to = o.View(dt, n, n);
    RETURN_IF_ERROR(FillRandom(backend, ta, 1));
    RETURN_IF_ERROR(FillRandom(backend, tw, 2));
    const int inner = cpu ? 1 : 10;
    std::vector<double> times;
    for (int r = 0; r < opt.repeats + 1; ++r) {
      backend->BeginStep(false);
      const double t0 = Seconds();
      for (int i = 0; i < inner; ++i) RETURN_IF_ERROR(backend->Gemm(ta, tw, to));
      RETURN_IF_ERROR(backend->Synchronize());
      const double dt_s = (Seconds() - t0) / inner;
      RETURN_IF_ERROR(backend->EndStep().status());
      if (r > 0) times.push_back(dt_s);  // first run is warm-up
    }
    c.gemm_flops_per_s = 2.0 * n * n * double(n) / Median(times);
    c.gemm_method = absl::StrCat(n, "x", n, "x", n, " ", DTypeName(dt),
                                 " GEMM through the backend, random data, median of ", opt.repeats,
                                 " after one warm-up");
  }

  // Copy bandwidth.
  const size_t bytes = opt.copy_bytes > 0 ? opt.copy_bytes : (cpu ? (256u << 20) : (2ull << 30));
  {
    const int64_t elems = static_cast<int64_t>(bytes / 4);
    ASSIGN_OR_RETURN(DeviceBuffer src, backend->Allocate(bytes));
    ASSIGN_OR_RETURN(DeviceBuffer dst, backend->Allocate(bytes));
    const Tensor ts = src.View(DType::kF32, 1, elems), td = dst.View(DType::kF32, 1, elems);
    RETURN_IF_ERROR(FillRandom(backend, ts, 3));
    RETURN_IF_ERROR(FillRandom(backend, td, 4));
    std::vector<double> times;
    for (int r = 0; r < opt.repeats + 1; ++r) {
      backend->BeginStep(false);
      const double t0 = Seconds();
      RETURN_IF_ERROR(backend->Copy(ts, td));
      RETURN_IF_ERROR(backend->Synchronize());
      const double dt_s = Seconds() - t0;
      RETURN_IF_ERROR(backend->EndStep().status());
      if (r > 0) times.push_back(dt_s);
    }
    c.bandwidth_bytes_per_s = 2.0 * double(bytes) / Median(times);
    c.bandwidth_method = absl::StrCat(bytes >> 20,
                                      " MiB device-to-device copy through the backend"
                                      ", bytes read + written, median of ",
                                      opt.repeats);
  }

  // Per-op dispatch cost: tiny adds back to back.
  {
    ASSIGN_OR_RETURN(DeviceBuffer x, backend->Allocate(64 * 4));
    const Tensor t = x.View(dt, 1, 16);
    RETURN_IF_ERROR(FillRandom(backend, t, 5));
    std::vector<double> per_op, issue;
    for (int r = 0; r < opt.repeats + 1; ++r) {
      backend->BeginStep(false);
      const double t0 = Seconds();
      for (int i = 0; i < opt.dispatch_ops; ++i) RETURN_IF_ERROR(backend->Add(t, t, t));
      const double t_issue = Seconds() - t0;
      RETURN_IF_ERROR(backend->Synchronize());
      const double total = Seconds() - t0;
      RETURN_IF_ERROR(backend->EndStep().status());
      if (r > 0) {
        per_op.push_back(total / opt.dispatch_ops * 1e6);
        issue.push_back(t_issue / opt.dispatch_ops * 1e6);
      }
    }
    c.op_dispatch_us = Median(per_op);
    c.op_issue_us = Median(issue);
    c.dispatch_method = absl::StrCat(opt.dispatch_ops,
                                     " 16-element adds issued back to back, one sync; time per op,"
                                     " median of ",
                                     opt.repeats);
  }
  return c;
}

std::string CalibrationToJson(const Calibration& c) {
  nlohmann::json j = {{"backend", c.backend},
                      {"device", c.device},
                      {"dtype", c.dtype},
                      {"gemm_flops_per_s", c.gemm_flops_per_s},
                      {"bandwidth_bytes_per_s", c.bandwidth_bytes_per_s},
                      {"op_dispatch_us", c.op_dispatch_us},
                      {"op_issue_us", c.op_issue_us},
                      {"ridge_flops_per_byte", c.ridge_flops_per_byte()},
                      {"gemm_method", c.gemm_method},
                      {"bandwidth_method", c.bandwidth_method},
                      {"dispatch_method", c.dispatch_method}};
  return j.dump(2);
}

absl::StatusOr<Calibration> CalibrationFromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("calibration: not a JSON object");
  }
  Calibration c;
  try {
    c.backend = j.at("backend").get<std::string>();
    c.device = j.at("device").get<std::string>();
    c.dtype = j.at("dtype").get<std::string>();
    c.gemm_flops_per_s = j.at("gemm_flops_per_s").get<double>();
    c.bandwidth_bytes_per_s = j.at("bandwidth_bytes_per_s").get<double>();
    c.op_dispatch_us = j.at("op_dispatch_us").get<double>();
    c.op_issue_us = j.value("op_issue_us", c.op_dispatch_us);
    c.gemm_method = j.value("gemm_method", "");
    c.bandwidth_method = j.value("bandwidth_method", "");
    c.dispatch_method = j.value("dispatch_method", "");
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("calibration: ", e.what()));
  }
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
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("calibration: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  ASSIGN_OR_RETURN(Calibration c, CalibrationFromJson(ss.str()));
  c.source = path;
  return c;
}

}  // namespace saturn
