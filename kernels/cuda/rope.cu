// Rotary position embedding in place on q [T, Hq*hd] and k [T, Hkv*hd], rotate-half (NeoX)
// pairing as Hugging Face Llama: element i pairs with i + hd/2, angle = pos * theta^(-2i/hd),
// that frequency scaled as kernels/rope_params.h says (Llama 3.x).
// One block per token; each thread rotates pairs of q and k heads, 8 bf16 pairs (two 16-byte
// loads) at a time when half a head is whole 16-byte vectors on aligned pointers.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_rotate.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

template <typename T>
__global__ void RopeKernel(T* q, T* k, const int32_t* __restrict__ positions, int q_heads,
                           int k_heads, int head_dim, float log2_theta, RopeParams rope) {
  const int64_t t = blockIdx.x;
  const int half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  T* qrow = q + t * static_cast<int64_t>(q_heads) * head_dim;
  T* krow = k + t * static_cast<int64_t>(k_heads) * head_dim;
  const int pairs = (q_heads + k_heads) * half;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int head = p / half, i = p % half;
    float s, c;
    RopeCosSin(pos, i, head_dim, log2_theta, rope, &c, &s);
    T* h = head < q_heads ? qrow + head * head_dim : krow + (head - q_heads) * head_dim;
    RotatePair(h, h, i, half, c, s);
  }
}

template <typename T>
__global__ void RopeVecKernel(T* q, T* k, const int32_t* __restrict__ positions, int q_heads,
                              int k_heads, int head_dim, float log2_theta, RopeParams rope) {
  constexpr int N = kVec<T>;
  const int64_t t = blockIdx.x;
  const int half = head_dim / 2, packs_per_head = half / N;
  const float pos = static_cast<float>(positions[t]);
  T* qrow = q + t * static_cast<int64_t>(q_heads) * head_dim;
  T* krow = k + t * static_cast<int64_t>(k_heads) * head_dim;
  const int packs = (q_heads + k_heads) * packs_per_head;
  for (int p = threadIdx.x; p < packs; p += blockDim.x) {
    const int head = p / packs_per_head, i = (p % packs_per_head) * N;
    T* h = head < q_heads ? qrow + head * head_dim : krow + (head - q_heads) * head_dim;
    RotatePairsVec(h, h, i, half, pos, log2_theta, head_dim, rope);
  }
}

}  // namespace

absl::Status Rope(cudaStream_t s, const Tensor& q, const Tensor& k, const Tensor& positions,
                  int head_dim, const RopeParams& rope) {
  if (q.dtype != k.dtype) return absl::InvalidArgumentError("rope: q and k dtypes differ");
  if (q.rows == 0) return absl::OkStatus();
  const int q_heads = static_cast<int>(q.cols / head_dim);
  const int k_heads = static_cast<int>(k.cols / head_dim);
  const int threads = 128;
  SATURN_DISPATCH_FLOAT(q.dtype, "rope", {
    if (CanVectorize(head_dim / 2, sizeof(scalar_t), {q.data, k.data})) {
      RopeVecKernel<scalar_t><<<static_cast<unsigned>(q.rows), threads, 0, s>>>(
          q.as<scalar_t>(), k.as<scalar_t>(), positions.as<int32_t>(), q_heads, k_heads, head_dim,
          log2f(rope.theta), rope);
      CUDA_CHECK_LAUNCH("RopeVecKernel");
      RecordLaunch(KernelFamily::kRope, reinterpret_cast<const void*>(&RopeVecKernel<scalar_t>),
                   q.rows, threads, 0);
      return absl::OkStatus();
    }
    RopeKernel<scalar_t><<<static_cast<unsigned>(q.rows), threads, 0, s>>>(
        q.as<scalar_t>(), k.as<scalar_t>(), positions.as<int32_t>(), q_heads, k_heads, head_dim,
        log2f(rope.theta), rope);
    CUDA_CHECK_LAUNCH("RopeKernel");
    RecordLaunch(KernelFamily::kRope, reinterpret_cast<const void*>(&RopeKernel<scalar_t>), q.rows,
                 threads, 0);
    return absl::OkStatus();
  })
}

}  // namespace saturn::gpu
