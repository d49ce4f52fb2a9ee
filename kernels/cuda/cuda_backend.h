// The CUDA backend: bf16 weights, activations and KV cache on one device, ops enqueued on one
// stream (kernels in kernels/cuda/*.cu, GEMMs through cuBLAS), per-op timing with pooled CUDA
// events, CUDA graph capture and replay, NVTX ranges per op. Plus two diagnostics helpers
// that need no backend: NVML's utilization and a per-kernel-family occupancy report.
// This header pulls in no CUDA headers, so any C++ target may include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace saturn {

// Fails cleanly (FAILED_PRECONDITION) when there is no driver, no device, or the device is
// unusable (compute capability below 8.0: no bf16), INVALID_ARGUMENT for a bad index.
// batch_invariant: GEMMs by gemm_invariant.cu and all attention by the prefill kernel, so a
// row's result does not depend on what shares its step (slower; not yet verified on a GPU).
// fused_kernels (--cuda_kernels=fused): a skinny weight-streaming GEMM at 1-16 rows (the fused
// QKV in one launch, SwiGLU in its epilogue), split-K GQA decode attention, RoPE fused with the
// KV write and split greedy sampling, beside the baseline set's cuBLAS and per-head attention
// until a GPU run verifies them; batch_invariant wins where both are asked for.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device, bool batch_invariant = false,
                                                           bool fused_kernels = false);

// nvidia-smi's "GPU utilization" for a CUDA device index: the share of the last sample period
// (1/6 s to 1 s) in which any kernel ran. Loads libnvidia-ml.so.1 at run time (dlopen) on
// first use; UNAVAILABLE when the library or the device is absent. Thread-safe.
absl::StatusOr<int> NvmlGpuUtilizationPercent(int device);

// Theoretical occupancy of the latest launch of each kernel family (families not launched
// yet in this process are omitted; GEMMs run inside cuBLAS and are not listed). A grid with
// fewer blocks than SMs leaves part of the chip idle however busy NVML says it is.
struct KernelOccupancy {
  std::string family;       // "rms_norm", "attention_decode", ...
  int64_t grid_blocks = 0;  // blocks in the latest launch
  int threads_per_block = 0;
  size_t dynamic_smem_bytes = 0;
  int max_active_blocks_per_sm = 0;  // cudaOccupancyMaxActiveBlocksPerMultiprocessor
  int num_sms = 0;
  double theoretical_occupancy = 0;  // resident threads per SM / max threads per SM, 0..1
  double waves = 0;                  // grid_blocks / (max_active_blocks_per_sm * num_sms)
  bool fills_device = false;         // grid_blocks >= num_sms
};
absl::StatusOr<std::vector<KernelOccupancy>> KernelOccupancyReport(int device);

}  // namespace saturn
