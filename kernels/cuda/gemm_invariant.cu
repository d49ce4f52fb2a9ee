// Batch-invariant GEMM (--batch_invariant=on): out[m, n] = sum_k x[m, k] w[n, k], one warp per
// output. Lane l sums k = l, l + 32, ... in order in fp32, then the warp adds the 32 partial
// sums in a fixed butterfly. The order depends on k alone, never on M or on how rows share a
// launch, so a row's bits are the same at any batch (cuBLAS picks its kernel, tiles and
// split-K by M). Slower than cuBLAS: every row re-reads the weights (from L2 at small M); a
// mode for reproducibility, not speed. Not yet verified on a GPU: tests/kernels/cuda/
// cuda_batch_invariance_test.cc checks it where a device exists.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {

constexpr int kWarps = 8;  // outputs (columns of a row) per block

template <typename T, typename O>
__global__ void __launch_bounds__(kWarps * 32)
    GemmRowInvariantKernel(const T* __restrict__ x, const T* __restrict__ w, O* __restrict__ out,
                           int64_t m, int64_t n, int64_t k) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (col >= n) return;  // warp-uniform
  const T* wr = w + col * k;
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    const T* xr = x + row * k;
    float acc = 0.0f;
    for (int64_t i = lane; i < k; i += 32) acc = fmaf(Load(xr, i), Load(wr, i), acc);
    acc = WarpSum(acc);
    if (lane == 0) Store(out, row * n + col, acc);
  }
}

template <typename T, typename O>
absl::Status Launch(cudaStream_t s, const Tensor& x, const Tensor& w, const Tensor& out) {
  const int64_t m = x.rows, n = w.rows, k = x.cols;
  const dim3 grid(static_cast<unsigned>((n + kWarps - 1) / kWarps),
                  static_cast<unsigned>(m < 65535 ? m : 65535));
  GemmRowInvariantKernel<T, O>
      <<<grid, kWarps * 32, 0, s>>>(x.as<T>(), w.as<T>(), out.as<O>(), m, n, k);
  CUDA_CHECK_LAUNCH("GemmRowInvariantKernel");
  RecordLaunch(KernelFamily::kGemmInvariant,
               reinterpret_cast<const void*>(&GemmRowInvariantKernel<T, O>),
               static_cast<int64_t>(grid.x) * grid.y, kWarps * 32, 0);
  return absl::OkStatus();
}

}  // namespace

absl::Status GemmInvariant(cudaStream_t s, const Tensor& x, const Tensor& w, const Tensor& out) {
  if (x.dtype != w.dtype) {
    return absl::UnimplementedError(absl::StrCat("gemm: mixed operand dtypes ", DTypeName(x.dtype),
                                                 " x ", DTypeName(w.dtype), " on CUDA"));
  }
  if (x.rows == 0 || w.rows == 0) return absl::OkStatus();
  if (x.dtype == DType::kF32 && out.dtype == DType::kF32) return Launch<float, float>(s, x, w, out);
  if (x.dtype == DType::kBF16 && out.dtype == DType::kBF16) {
    return Launch<__nv_bfloat16, __nv_bfloat16>(s, x, w, out);
  }
  if (x.dtype == DType::kBF16 && out.dtype == DType::kF32) {
    return Launch<__nv_bfloat16, float>(s, x, w, out);
  }
  return absl::UnimplementedError(absl::StrCat("gemm (batch-invariant): ", DTypeName(x.dtype),
                                               " x ", DTypeName(w.dtype), " -> ",
                                               DTypeName(out.dtype), " on CUDA"));
}

}  // namespace saturn::gpu
