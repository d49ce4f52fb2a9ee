// Fuzz target: a calibration JSON file (--calibration_file) through CalibrationFromJson. A
// Calibration or an error, never a crash; an accepted one serializes again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/measure/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<saturn::Calibration> cal = saturn::CalibrationFromJson(text);
  if (cal.ok()) (void)saturn::CalibrationToJson(*cal);
  return 0;
}
