// Embedding lookup: out[t, :] = table[ids[t], :]. One block per token, threads stride the
// row. Out-of-range ids write zeros (the host cannot check device-resident ids without a
// round trip; the runner validates prompts against the vocabulary beforehand). Rows of whole
// 16-byte vectors on aligned pointers are copied 16 bytes per load.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

template <typename T>
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, const T* __restrict__ table,
                                T* __restrict__ out, int64_t vocab, int64_t dim) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t];
  T* dst = out + t * dim;
  if (id < 0 || id >= vocab) {
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) Store(dst, c, 0.0f);
    return;
  }
  const T* src = table + id * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = src[c];
}

__global__ void EmbeddingVecKernel(const int32_t* __restrict__ ids, const char* __restrict__ table,
                                   char* __restrict__ out, int64_t vocab, int64_t row_bytes) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t];
  CopyRowVec(id < 0 || id >= vocab ? nullptr : table + id * row_bytes, out + t * row_bytes,
             row_bytes);
}

template <typename T>
absl::Status Launch(cudaStream_t s, const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t tokens = ids.cols;
  if (tokens == 0) return absl::OkStatus();
  const int threads = 256;
  if (CanVectorize(table.cols, sizeof(T), {table.data, out.data})) {
    EmbeddingVecKernel<<<static_cast<unsigned>(tokens), threads, 0, s>>>(
        ids.as<int32_t>(), static_cast<const char*>(table.data), static_cast<char*>(out.data),
        table.rows, table.cols * static_cast<int64_t>(sizeof(T)));
    CUDA_CHECK_LAUNCH("EmbeddingVecKernel");
    RecordLaunch(KernelFamily::kEmbedding, reinterpret_cast<const void*>(&EmbeddingVecKernel),
                 tokens, threads, 0);
    return absl::OkStatus();
  }
  EmbeddingKernel<T><<<static_cast<unsigned>(tokens), threads, 0, s>>>(
      ids.as<int32_t>(), table.as<T>(), out.as<T>(), table.rows, table.cols);
  CUDA_CHECK_LAUNCH("EmbeddingKernel");
  RecordLaunch(KernelFamily::kEmbedding, reinterpret_cast<const void*>(&EmbeddingKernel<T>), tokens,
               threads, 0);
  return absl::OkStatus();
}

}  // namespace

absl::Status Embedding(cudaStream_t s, const Tensor& ids, const Tensor& table, const Tensor& out) {
  SATURN_DISPATCH_FLOAT(table.dtype, "embedding", return Launch<scalar_t>(s, ids, table, out););
}

}  // namespace saturn::gpu
