// The CPU backend: f32 weights, activations and KV cache in 64-byte aligned host memory; ops
// run synchronously on the calling thread plus a small pool (GEMM through OpenBLAS).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace saturn {

// num_threads: total threads for ops and OpenBLAS (0: std::thread::hardware_concurrency()).
// OpenBLAS's thread count is process-wide, so the last CPU backend created sets it.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int num_threads);

}  // namespace saturn
