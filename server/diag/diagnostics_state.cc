// DiagnosticsState: the server's flags -> the diagnostics session; NVML sampling.
#include "server/diag/diagnostics_state.h"

#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/diag/diagnostics_request.h"

namespace saturn {

absl::Status DiagnosticsState::InitCalibration(Engine* engine, const ServerConfig& config) {
  CalibrationSource source;
  if (config.calibration == "file") {
    absl::StatusOr<Calibration> loaded = LoadCalibration(config.calibration_file);
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--calibration_file: cannot load \"",
                                                     config.calibration_file,
                                                     "\": ", loaded.status().message()));
    }
    loaded->source = config.calibration_file;
    const std::string backend = engine->info().backend;
    if (loaded->backend != backend) {
      std::cerr << "saturn-server: warning: --calibration_file was measured on backend \""
                << loaded->backend << "\", the server runs \"" << backend << "\"\n";
    }
    source.given = std::move(*loaded);
  }
  source.quick = config.calibration == "quick";
  // Quick (the test suite starts many servers): an eighth, about 250 ms by default.
  source.probe_ms = source.quick ? config.probe_steps_ms / 8 : config.probe_steps_ms;
  if (absl::Status s = session_.Start(engine, source); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("--calibration=", config.calibration, ": ", s.message()));
  }
  if (!config.save_calibration.empty()) {
    if (absl::Status s = SaveCalibration(*session_.calibration(), config.save_calibration);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--save_calibration: cannot write \"",
                                                 config.save_calibration, "\": ", s.message()));
    }
  }
  return absl::OkStatus();
}

void DiagnosticsState::StartSampling(const Engine* engine) {
  // One reading every 200 ms, for the longest window a report may ask.
  constexpr absl::Duration kInterval = absl::Milliseconds(200);
  const size_t capacity = static_cast<size_t>(kMaxWindowSeconds * 1000 / 200) + 1;
  utilization_ = std::make_unique<UtilizationSampler>(
      [engine] { return engine->device_utilization(); }, kInterval, capacity);
  utilization_->Start();
}

void DiagnosticsState::StopSampling() {
  if (utilization_ != nullptr) utilization_->Stop();
}

double DiagnosticsState::device_utilization_percent(double begin_us, double end_us) const {
  return utilization_ != nullptr ? utilization_->MeanPercent(begin_us, end_us) : -1;
}

}  // namespace saturn
