// CreateBackend: "cpu", "cuda" or "auto". Auto picks CUDA when a usable device exists and
// otherwise falls back to the CPU backend with one log line saying why. "null" (benches):
// kernels/null_backend.h.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/null_backend.h"
#if defined(SATURN_WITH_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace saturn {

namespace {

absl::StatusOr<std::unique_ptr<Backend>> Cpu(int num_threads, const std::string& dtype,
                                             const std::string& kv_cache_dtype,
                                             const std::string& batch_invariant) {
  CpuBackendOptions o;
  o.num_threads = num_threads;
  o.weight_dtype = dtype;
  o.kv_cache_dtype = kv_cache_dtype;
  o.batch_invariant = batch_invariant != "off";
  return CreateCpuBackend(o);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& kind, int num_threads,
                                                       const std::string& dtype,
                                                       const std::string& kv_cache_dtype,
                                                       const std::string& batch_invariant,
                                                       const std::string& cuda_kernels) {
  if (batch_invariant != "auto" && batch_invariant != "on" && batch_invariant != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_invariant: unknown value \"", batch_invariant, "\" (expected auto, on or off)"));
  }
  // v1 and v2 are aliases of baseline and fused, for the scripts that name the sets so.
  const bool fused_kernels = cuda_kernels == "fused" || cuda_kernels == "v2";
  if (!fused_kernels && cuda_kernels != "baseline" && cuda_kernels != "v1") {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_kernels: unknown value \"", cuda_kernels,
                     "\" (expected baseline or fused, or their aliases v1 and v2)"));
  }
  if (kind == "cpu") return Cpu(num_threads, dtype, kv_cache_dtype, batch_invariant);
  if (kind == "null") return CreateNullBackend();
  if (kind != "cuda" && kind != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend: unknown value \"", kind, "\" (expected auto, cpu or cuda; null for benches)"));
  }
#if defined(SATURN_WITH_CUDA)
  absl::StatusOr<std::unique_ptr<Backend>> cuda =
      CreateCudaBackend(/*device=*/0, /*batch_invariant=*/batch_invariant == "on", fused_kernels);
  if (cuda.ok() && dtype != "auto" && dtype != DTypeName((*cuda)->compute_dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("dtype: the CUDA backend computes in ",
                                                   DTypeName((*cuda)->compute_dtype()), "; got \"",
                                                   dtype, "\""));
  }
  if (cuda.ok() && kv_cache_dtype != "auto" &&
      kv_cache_dtype != DTypeName((*cuda)->kv_cache_dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_cache_dtype: the CUDA backend caches K and V in ",
                     DTypeName((*cuda)->kv_cache_dtype()), "; got \"", kv_cache_dtype, "\""));
  }
  if (cuda.ok() && batch_invariant == "on") {
    std::cerr << "saturn: --batch_invariant=on on CUDA: fixed-order GEMM and attention kernels "
                 "(slower than cuBLAS; not yet verified on a GPU)"
              << (fused_kernels ? "; --cuda_kernels=fused yields to it" : "") << "\n";
  } else if (cuda.ok() && fused_kernels) {
    std::cerr << "saturn: --cuda_kernels=fused: skinny GEMM at 1-16 rows and split-K decode "
                 "attention (not yet verified on a GPU)\n";
  }
  if (cuda.ok() || kind == "cuda") return cuda;
  std::cerr << "saturn: no usable CUDA device (" << cuda.status().message()
            << "); using the CPU backend\n";
#else
  if (kind == "cuda") {
    return absl::FailedPreconditionError(
        "backend: this build has no CUDA backend (nvcc was not found at build time)");
  }
  std::cerr << "saturn: built without CUDA; using the CPU backend\n";
#endif
  return Cpu(num_threads, dtype, kv_cache_dtype, batch_invariant);
}

}  // namespace saturn
