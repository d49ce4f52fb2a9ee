// The CPU backend: f32 activations, f32 or bf16 KV cache, f32, bf16, q8_0 or q4_0 GEMM weights, in
// 64-byte aligned host memory; ops run synchronously on the calling thread plus a small pool, with
// kernels picked at run time for the CPU's instruction set (kernels/cpu/isa_kernels.h) and
// GEMM paths chosen by measurement (kernels/cpu/gemm/gemm_planner.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"

namespace saturn {

struct CpuBackendOptions {
  int num_threads = 0;  // total threads for ops and OpenBLAS (0: hardware_concurrency)
  // GEMM weight precision: "f32", "bf16", "q8_0", "q4_0" (llama.cpp's blocks, quantized at
  // upload: kernels/quant_blocks.h), or "auto" (bf16 where the CPU has native bf16 dot
  // products, AVX512-BF16 or AMX; f32 elsewhere).
  std::string weight_dtype = "auto";
  // KV cache precision: "f32", "bf16", or "auto" (the weights' precision, as vLLM's
  // --kv-cache-dtype auto takes the model's).
  std::string kv_cache_dtype = "auto";
  // Kernel level; unset: the best this CPU runs. Tests force lower levels to check each path.
  std::optional<cpu::Isa> isa;
  // How long an idle pool worker polls for the next op while its core is its own
  // (kernels/cpu/poll_governor.h); 0 turns polling off. Unset: the environment variable
  // SATURN_CPU_POLL_US where set (as OpenMP runtimes read GOMP_SPINCOUNT), else 200 us.
  std::optional<int64_t> poll_us;
  // Batch invariance (GemmPlanner::set_batch_invariant): a request's greedy tokens and
  // logprobs are bit-identical whether it runs alone or beside others. On by default; off
  // lets the planner pick the fastest GEMM path per row count (what that gains:
  // bench/batch_invariance_ab.sh, README.md).
  bool batch_invariant = true;
  // GEMM weights packed as they are uploaded, which every M reads as one sequential stream
  // with nothing packed per GEMM: bf16 where AMX runs in AMX tiles (tensor.h:
  // Layout::kAmxTiles, gemm_amx.cc: GemmAmxTilesBf16), f32 at the AVX-512 level in 32-row
  // panels (Layout::kPanels, the blocked kernel's order). Each is batch-invariant and beat the
  // row-major paths where measured (docs/CPU.md), so both --batch_invariant settings use them.
  // False keeps weights row-major for the planner's paths (tests and comparisons). Unset: the
  // environment variable SATURN_CPU_PACKED_WEIGHTS ("0" or "1") where set, else on.
  std::optional<bool> packed_weights;
};

// Fails with INVALID_ARGUMENT on a negative thread count, an unknown dtype, an ISA the CPU
// lacks, a poll time (option or SATURN_CPU_POLL_US) that is not an integer in [0, 100000], or
// a SATURN_CPU_PACKED_WEIGHTS other than 0 or 1.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options);

// f32 weights, best ISA. num_threads: total threads for ops and OpenBLAS (0:
// std::thread::hardware_concurrency()). OpenBLAS's thread count is process-wide, so the last
// CPU backend created sets it.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int num_threads);

}  // namespace saturn
