// GEMM through cuBLAS: row-major out[M, N] = x[M, K] * w[N, K]^T with fp32 accumulation
// (CUBLAS_COMPUTE_32F). cuBLAS is column-major, so we compute out^T = w * x^T: a row-major
// [N, K] w is a column-major K x N matrix (transposed: op T), a row-major [M, K] x is a
// column-major K x M matrix (op N), and the column-major N x M result is row-major out.
// Supported: bf16 x bf16 -> bf16 or f32 (the LM head writes f32 logits), f32 x f32 -> f32.
#include <cublas_v2.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {

absl::StatusOr<cudaDataType_t> CudaType(DType d) {
  switch (d) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("gemm: dtype ", DTypeName(d), " is not a float"));
}

}  // namespace

absl::Status Gemm(cublasHandle_t h, const Tensor& x, const Tensor& w, const Tensor& out) {
  if (x.dtype != w.dtype) {
    return absl::UnimplementedError(absl::StrCat("gemm: mixed operand dtypes ", DTypeName(x.dtype),
                                                 " x ", DTypeName(w.dtype), " on CUDA"));
  }
  if (x.dtype == DType::kF32 && out.dtype != DType::kF32) {
    return absl::UnimplementedError("gemm: f32 operands need an f32 output on CUDA");
  }
  const int64_t m = x.rows, n = w.rows, k = x.cols;
  if (m == 0 || n == 0) return absl::OkStatus();
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    return absl::InvalidArgumentError("gemm: dimension exceeds cuBLAS's int range");
  }
  auto ab = CudaType(x.dtype);
  if (!ab.ok()) return ab.status();
  auto c = CudaType(out.dtype);
  if (!c.ok()) return c.status();
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                            static_cast<int>(k), &alpha, w.data, *ab, static_cast<int>(k), x.data,
                            *ab, static_cast<int>(k), &beta, out.data, *c, static_cast<int>(n),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace saturn::gpu
