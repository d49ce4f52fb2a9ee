// The null backend (--backend=null): memory and transfers as the CPU backend does them, every
// op recorded with its cost as usual and then not run. A step then takes only the host's time:
// scheduling, input preparation, op issue, sampling's read-back, token events. It measures the
// host path the GPU must not wait for (saturn-bench-host), never serves real text: its sampled
// tokens are whatever the token buffer holds (zeros).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace saturn {

absl::StatusOr<std::unique_ptr<Backend>> CreateNullBackend();

}  // namespace saturn
