// KV-cache write: k_cache[slot[t], :] = k[t, :], same for v. One block per token. Negative
// slots are skipped (vLLM's convention for padding tokens); slots past the cache are skipped
// too, so a bad slot never writes out of bounds. Rows of whole 16-byte vectors on aligned
// pointers are copied 16 bytes per load.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

template <typename T, typename C>
__global__ void KvWriteKernel(const T* __restrict__ k, const T* __restrict__ v,
                              const int32_t* __restrict__ slots, C* __restrict__ k_cache,
                              C* __restrict__ v_cache, int64_t cache_rows, int64_t width) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= cache_rows) return;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    Store(k_cache, slot * width + c, Load(k, t * width + c));
    Store(v_cache, slot * width + c, Load(v, t * width + c));
  }
}

// Same dtype on both sides: rows are copied as raw 16-byte vectors.
__global__ void KvWriteVecKernel(const char* __restrict__ k, const char* __restrict__ v,
                                 const int32_t* __restrict__ slots, char* __restrict__ k_cache,
                                 char* __restrict__ v_cache, int64_t cache_rows,
                                 int64_t row_bytes) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= cache_rows) return;
  CopyRowVec(k + t * row_bytes, k_cache + slot * row_bytes, row_bytes);
  CopyRowVec(v + t * row_bytes, v_cache + slot * row_bytes, row_bytes);
}

}  // namespace

absl::Status KvWrite(cudaStream_t s, const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                     const Tensor& k_cache, const Tensor& v_cache) {
  if (k.dtype != v.dtype || k_cache.dtype != v_cache.dtype || k.dtype != k_cache.dtype) {
    return absl::InvalidArgumentError("kv_write: k, v and cache dtypes must match");
  }
  if (k.rows == 0) return absl::OkStatus();
  const int threads = 128;
  const int64_t cache_rows = std::min(k_cache.rows, v_cache.rows);
  if (CanVectorize(k.cols, DTypeSize(k.dtype), {k.data, v.data, k_cache.data, v_cache.data})) {
    KvWriteVecKernel<<<static_cast<unsigned>(k.rows), threads, 0, s>>>(
        static_cast<const char*>(k.data), static_cast<const char*>(v.data),
        slot_mapping.as<int32_t>(), static_cast<char*>(k_cache.data),
        static_cast<char*>(v_cache.data), cache_rows,
        k.cols * static_cast<int64_t>(DTypeSize(k.dtype)));
    CUDA_CHECK_LAUNCH("KvWriteVecKernel");
    RecordLaunch(KernelFamily::kKvWrite, reinterpret_cast<const void*>(&KvWriteVecKernel), k.rows,
                 threads, 0);
    return absl::OkStatus();
  }
  SATURN_DISPATCH_FLOAT(k.dtype, "kv_write", {
    KvWriteKernel<scalar_t, scalar_t><<<static_cast<unsigned>(k.rows), threads, 0, s>>>(
        k.as<scalar_t>(), v.as<scalar_t>(), slot_mapping.as<int32_t>(), k_cache.as<scalar_t>(),
        v_cache.as<scalar_t>(), cache_rows, k.cols);
    CUDA_CHECK_LAUNCH("KvWriteKernel");
    RecordLaunch(KernelFamily::kKvWrite,
                 reinterpret_cast<const void*>(&KvWriteKernel<scalar_t, scalar_t>), k.rows, threads,
                 0);
    return absl::OkStatus();
  })
}

}  // namespace saturn::gpu
