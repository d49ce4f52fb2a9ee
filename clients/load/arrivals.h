// When the open loop sends each request: a seeded Poisson process (exponential gaps with
// mean 1/rate), or everything at once for rate = inf. Pure; no clock, no threads.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"

namespace saturn::clients {

class PoissonSchedule {
 public:
  // rate: requests per second, > 0; +inf sends every request at offset 0.
  PoissonSchedule(double rate, uint64_t seed);
  // Offset in seconds from the run's start at which the next request is sent; each call
  // moves on by one exponential gap.
  double Next();
  double rate() const { return rate_; }

 private:
  double rate_;
  double t_ = 0;
  std::mt19937_64 rng_;
};

// "inf" (or "infinity") or a positive number of requests per second. `flag` names the flag
// in the error.
absl::StatusOr<double> ParseRate(const std::string& flag, const std::string& text);

}  // namespace saturn::clients
