// Elementwise ops: add, gather rows, copy, and the f32 -> bf16 conversion behind UploadF32.
// Flat grid-stride loops (gather: one block per output row); add and gather take 16-byte
// packs when their rows are whole vectors on aligned pointers. Copy is a device-to-device
// cudaMemcpyAsync, which graph capture records as a memcpy node.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

constexpr int kThreads = 256;

int64_t FlatBlocks(int64_t n) { return std::min<int64_t>((n + kThreads - 1) / kThreads, 65535); }

template <typename T>
__global__ void AddKernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Store(out, i, Load(a, i) + Load(b, i));
  }
}

template <typename T>
__global__ void AddVecKernel(const T* a, const T* b, T* out, int64_t packs) {
  constexpr int N = kVec<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x[N], y[N];
    LoadVec(a, i * N, x);
    LoadVec(b, i * N, y);
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] += y[k];
    StoreVec(out, i * N, x);
  }
}

// Out-of-range indices write zeros rather than read out of bounds.
template <typename T>
__global__ void GatherRowsKernel(const T* __restrict__ x, const int32_t* __restrict__ idx,
                                 T* __restrict__ out, int64_t x_rows, int64_t cols) {
  const int64_t r = blockIdx.x;
  const int64_t src = idx[r];
  T* dst = out + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    if (src >= 0 && src < x_rows) {
      dst[c] = x[src * cols + c];
    } else {
      Store(dst, c, 0.0f);
    }
  }
}

__global__ void GatherRowsVecKernel(const char* __restrict__ x, const int32_t* __restrict__ idx,
                                    char* __restrict__ out, int64_t x_rows, int64_t row_bytes) {
  const int64_t r = blockIdx.x;
  const int64_t src = idx[r];
  CopyRowVec(src >= 0 && src < x_rows ? x + src * row_bytes : nullptr, out + r * row_bytes,
             row_bytes);
}

__global__ void ConvertKernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst,
                              int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

}  // namespace

absl::Status Add(cudaStream_t s, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (a.dtype != b.dtype || a.dtype != out.dtype) {
    return absl::InvalidArgumentError("add: dtypes differ");
  }
  const int64_t n = a.numel();
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = FlatBlocks(n);
  SATURN_DISPATCH_FLOAT(a.dtype, "add", {
    if (CanVectorize(n, sizeof(scalar_t), {a.data, b.data, out.data})) {
      const int64_t vblocks = FlatBlocks(n / kVec<scalar_t>);
      AddVecKernel<scalar_t><<<static_cast<unsigned>(vblocks), kThreads, 0, s>>>(
          a.as<scalar_t>(), b.as<scalar_t>(), out.as<scalar_t>(), n / kVec<scalar_t>);
      CUDA_CHECK_LAUNCH("AddVecKernel");
      RecordLaunch(KernelFamily::kElementwise,
                   reinterpret_cast<const void*>(&AddVecKernel<scalar_t>), vblocks, kThreads, 0);
      return absl::OkStatus();
    }
    AddKernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        a.as<scalar_t>(), b.as<scalar_t>(), out.as<scalar_t>(), n);
    CUDA_CHECK_LAUNCH("AddKernel");
    RecordLaunch(KernelFamily::kElementwise, reinterpret_cast<const void*>(&AddKernel<scalar_t>),
                 blocks, kThreads, 0);
    return absl::OkStatus();
  })
}

absl::Status GatherRows(cudaStream_t s, const Tensor& x, const Tensor& indices, const Tensor& out) {
  if (out.rows == 0) return absl::OkStatus();
  const int threads = x.cols >= 256 ? 256 : 128;
  if (x.dtype == out.dtype && CanVectorize(x.cols, DTypeSize(x.dtype), {x.data, out.data})) {
    GatherRowsVecKernel<<<static_cast<unsigned>(out.rows), threads, 0, s>>>(
        static_cast<const char*>(x.data), indices.as<int32_t>(), static_cast<char*>(out.data),
        x.rows, x.cols * static_cast<int64_t>(DTypeSize(x.dtype)));
    CUDA_CHECK_LAUNCH("GatherRowsVecKernel");
    RecordLaunch(KernelFamily::kGatherRows, reinterpret_cast<const void*>(&GatherRowsVecKernel),
                 out.rows, threads, 0);
    return absl::OkStatus();
  }
  SATURN_DISPATCH_FLOAT(x.dtype, "gather_rows", {
    GatherRowsKernel<scalar_t><<<static_cast<unsigned>(out.rows), threads, 0, s>>>(
        x.as<scalar_t>(), indices.as<int32_t>(), out.as<scalar_t>(), x.rows, x.cols);
    CUDA_CHECK_LAUNCH("GatherRowsKernel");
    RecordLaunch(KernelFamily::kGatherRows,
                 reinterpret_cast<const void*>(&GatherRowsKernel<scalar_t>), out.rows, threads, 0);
    return absl::OkStatus();
  })
}

absl::Status Copy(cudaStream_t s, const Tensor& src, const Tensor& dst) {
  if (src.bytes() == 0) return absl::OkStatus();
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, s));
  return absl::OkStatus();
}

absl::Status ConvertF32ToBF16(cudaStream_t s, const float* src, void* dst, int64_t n) {
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = FlatBlocks(n);
  ConvertKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
      src, static_cast<__nv_bfloat16*>(dst), n);
  CUDA_CHECK_LAUNCH("ConvertKernel");
  RecordLaunch(KernelFamily::kConvert, reinterpret_cast<const void*>(&ConvertKernel), blocks,
               kThreads, 0);
  return absl::OkStatus();
}

}  // namespace saturn::gpu
