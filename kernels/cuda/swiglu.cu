// SwiGLU: out[t, j] = silu(gate_up[t, j]) * gate_up[t, F + j], with gate_up [T, 2F] (gate
// columns first). A flat grid-stride loop over T*F outputs; when F is a whole number of
// 16-byte vectors on aligned pointers, over 16-byte packs (one division per pack, not per
// element).
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

template <typename T>
__global__ void SwiGluKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t f,
                             int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / f, j = i % f;
    const float g = Load(gate_up, t * 2 * f + j);
    const float u = Load(gate_up, t * 2 * f + f + j);
    Store(out, i, SiluMul(g, u));
  }
}

template <typename T>
__global__ void SwiGluVecKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t f,
                                int64_t packs) {
  constexpr int N = kVec<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < packs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * N, t = e / f, j = e - t * f;
    float g[N], u[N];
    LoadVec(gate_up, t * 2 * f + j, g);
    LoadVec(gate_up, t * 2 * f + f + j, u);
#pragma unroll
    for (int k = 0; k < N; ++k) g[k] = SiluMul(g[k], u[k]);
    StoreVec(out, e, g);
  }
}

}  // namespace

absl::Status SwiGlu(cudaStream_t s, const Tensor& gate_up, const Tensor& out) {
  if (gate_up.dtype != out.dtype) return absl::InvalidArgumentError("swiglu: dtypes differ");
  const int64_t n = out.numel();
  if (n == 0) return absl::OkStatus();
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  SATURN_DISPATCH_FLOAT(out.dtype, "swiglu", {
    if (CanVectorize(out.cols, sizeof(scalar_t), {gate_up.data, out.data})) {
      const int64_t packs = n / kVec<scalar_t>;
      const int64_t vblocks = std::min<int64_t>((packs + threads - 1) / threads, 65535);
      SwiGluVecKernel<scalar_t><<<static_cast<unsigned>(vblocks), threads, 0, s>>>(
          gate_up.as<scalar_t>(), out.as<scalar_t>(), out.cols, packs);
      CUDA_CHECK_LAUNCH("SwiGluVecKernel");
      RecordLaunch(KernelFamily::kSwiGlu, reinterpret_cast<const void*>(&SwiGluVecKernel<scalar_t>),
                   vblocks, threads, 0);
      return absl::OkStatus();
    }
    SwiGluKernel<scalar_t><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
        gate_up.as<scalar_t>(), out.as<scalar_t>(), out.cols, n);
    CUDA_CHECK_LAUNCH("SwiGluKernel");
    RecordLaunch(KernelFamily::kSwiGlu, reinterpret_cast<const void*>(&SwiGluKernel<scalar_t>),
                 blocks, threads, 0);
    return absl::OkStatus();
  })
}

}  // namespace saturn::gpu
