// Poisson arrivals for the open loop (see arrivals.h).
#include "clients/load/arrivals.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace saturn::clients {

PoissonSchedule::PoissonSchedule(double rate, uint64_t seed) : rate_(rate), rng_(seed) {}

double PoissonSchedule::Next() {
  if (std::isinf(rate_)) return 0;
  t_ += std::exponential_distribution<double>(rate_)(rng_);
  return t_;
}

absl::StatusOr<double> ParseRate(const std::string& flag, const std::string& text) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "inf" || t == "infinity") return INFINITY;
  double r = 0;
  if (!absl::SimpleAtod(t, &r) || !std::isfinite(r) || r <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": expected requests per second > 0, or inf (all at once), got \"", text, "\""));
  }
  return r;
}

}  // namespace saturn::clients
