// A Calibration whose every stored field (engine/measure/calibration_fields.h) holds its own value,
// none of them the default: a field a copy drops or swaps shows as a mismatch.
#pragma once

#include <string>
#include <type_traits>
#include <variant>

#include "engine/measure/calibration_fields.h"

namespace saturn::testing_calibration {

inline Calibration DistinctValues() {
  Calibration c;
  int i = 0;
  for (const CalibrationField& f : kCalibrationFields) {
    ++i;
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(c.*member)>;
          if constexpr (std::is_same_v<T, std::string>) {
            c.*member = std::string("value ") + f.name;
          } else if constexpr (std::is_same_v<T, double>) {
            c.*member = 1000.25 + i;
          } else {
            static_assert(std::is_same_v<T, bool>, "a CalibrationField type this cannot set");
            c.*member = !(c.*member);
          }
        },
        f.member);
  }
  c.source = "a source of its own";  // not stored in files; the proto carries it
  return c;
}

}  // namespace saturn::testing_calibration
