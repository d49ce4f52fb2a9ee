// CUDA_CHECK / CUBLAS_CHECK / CUDA_CHECK_LAUNCH: turn cudaError_t and cublasStatus_t into an
// absl::Status naming the failing statement, file and line, and return it from the caller.
// Host-only. Never exits or aborts: a server outlives a failed launch.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"

namespace saturn::gpu {

inline absl::Status CudaStatus(cudaError_t e, const char* stmt, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(stmt, " failed at ", file, ":", line, ": ",
                                       cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
      return absl::InvalidArgumentError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

inline const char* CublasStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

inline absl::Status CublasStatus(cublasStatus_t s, const char* stmt, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg =
      absl::StrCat(stmt, " failed at ", file, ":", line, ": ", CublasStatusName(s));
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH) {
    return absl::UnimplementedError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace saturn::gpu

// Returns an error Status from the enclosing function when `stmt` fails.
#define CUDA_CHECK(stmt) \
  RETURN_IF_ERROR(::saturn::gpu::CudaStatus((stmt), #stmt, __FILE__, __LINE__))
#define CUBLAS_CHECK(stmt) \
  RETURN_IF_ERROR(::saturn::gpu::CublasStatus((stmt), #stmt, __FILE__, __LINE__))
// After a kernel launch: picks up bad launch configurations (not device faults, which show
// at the next Synchronize/Download).
#define CUDA_CHECK_LAUNCH(what) \
  RETURN_IF_ERROR(::saturn::gpu::CudaStatus(cudaGetLastError(), what, __FILE__, __LINE__))
