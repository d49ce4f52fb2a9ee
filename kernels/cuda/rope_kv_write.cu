// Rotary embedding and KV-cache write as one kernel (--cuda_kernels=fused): q [T, Hq*hd] rotated
// in place; k [T, Hkv*hd] read, rotated and written straight to k_cache[slot[t], :]; v copied
// to v_cache[slot[t], :]. One block per token, as rope.cu and kv_write.cu; it saves one launch
// per layer and k's write and re-read. k itself is left unrotated (scratch). Negative slots
// and slots past the cache skip the cache writes (kv_write.cu's convention); q is rotated
// either way. The rotation is rope_rotate.cuh's, the one rope.cu uses.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_rotate.cuh"
#include "kernels/cuda/vector_access.cuh"

namespace saturn::gpu {
namespace {

// Launch arguments shared by both kernels.
struct RopeKvArgs {
  int q_heads, k_heads, head_dim;
  int64_t cache_rows;
  float log2_theta;
  RopeParams rope;
};

// One token's rows: q's, k's, and the cache rows k and v go to (none where the slot is
// negative or past the cache).
template <typename T>
struct TokenRows {
  T* q;
  const T* k;
  T* k_dst;
  bool write;
  int64_t slot, kv_width;
  float pos;
  int heads;  // heads to rotate: q's, plus k's where the row is written

  __device__ TokenRows(T* q_all, const T* k_all, T* k_cache, const int32_t* positions,
                       const int32_t* slots, const RopeKvArgs& a) {
    const int64_t t = blockIdx.x;
    slot = slots[t];
    write = slot >= 0 && slot < a.cache_rows;
    kv_width = int64_t{a.k_heads} * a.head_dim;
    pos = static_cast<float>(positions[t]);
    q = q_all + t * int64_t{a.q_heads} * a.head_dim;
    k = k_all + t * kv_width;
    k_dst = k_cache + (write ? slot : 0) * kv_width;
    heads = a.q_heads + (write ? a.k_heads : 0);
  }
  // Head h's source and destination: q's in place, k's from k into the cache.
  __device__ const T* src(int h, const RopeKvArgs& a) const {
    return h < a.q_heads ? q + int64_t{h} * a.head_dim : k + int64_t{h - a.q_heads} * a.head_dim;
  }
  __device__ T* dst(int h, const RopeKvArgs& a) const {
    return h < a.q_heads ? q + int64_t{h} * a.head_dim
                         : k_dst + int64_t{h - a.q_heads} * a.head_dim;
  }
};

// kVector: half a head is whole 16-byte vectors and every pointer is 16-byte aligned, so
// pairs are rotated and v copied 16 bytes a load; else one element at a time.
template <typename T, bool kVector>
__global__ void RopeKvWriteKernel(T* q, const T* __restrict__ k, const T* __restrict__ v,
                                  const int32_t* __restrict__ positions,
                                  const int32_t* __restrict__ slots, T* __restrict__ k_cache,
                                  T* __restrict__ v_cache, RopeKvArgs a) {
  const TokenRows<T> row(q, k, k_cache, positions, slots, a);
  const int half = a.head_dim / 2;
  if constexpr (kVector) {
    const int packs_per_head = half / kVec<T>;
    for (int p = threadIdx.x; p < row.heads * packs_per_head; p += blockDim.x) {
      const int head = p / packs_per_head, i = (p % packs_per_head) * kVec<T>;
      RotatePairsVec(row.src(head, a), row.dst(head, a), i, half, row.pos, a.log2_theta, a.head_dim,
                     a.rope);
    }
  } else {
    for (int p = threadIdx.x; p < row.heads * half; p += blockDim.x) {
      const int head = p / half, i = p % half;
      float s, c;
      RopeCosSin(row.pos, i, a.head_dim, a.log2_theta, a.rope, &c, &s);
      RotatePair(row.src(head, a), row.dst(head, a), i, half, c, s);
    }
  }
  if (!row.write) return;
  const T* vrow = v + int64_t{blockIdx.x} * row.kv_width;
  T* vdst = v_cache + row.slot * row.kv_width;
  if constexpr (kVector) {
    CopyRowVec(vrow, vdst, row.kv_width * sizeof(T));
  } else {
    for (int64_t e = threadIdx.x; e < row.kv_width; e += blockDim.x) vdst[e] = vrow[e];
  }
}

}  // namespace

absl::Status RopeKvWrite(cudaStream_t s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& positions, int head_dim, const RopeParams& rope,
                         const Tensor& slot_mapping, const Tensor& k_cache, const Tensor& v_cache) {
  if (q.dtype != k.dtype || k.dtype != v.dtype || k_cache.dtype != k.dtype ||
      v_cache.dtype != k.dtype) {
    return absl::InvalidArgumentError("rope_kv_write: q, k, v and cache dtypes must match");
  }
  if (q.rows == 0) return absl::OkStatus();
  RopeKvArgs a;
  a.q_heads = static_cast<int>(q.cols / head_dim);
  a.k_heads = static_cast<int>(k.cols / head_dim);
  a.head_dim = head_dim;
  a.cache_rows = std::min(k_cache.rows, v_cache.rows);
  a.log2_theta = log2f(rope.theta);
  a.rope = rope;
  const int threads = 128;
  const auto blocks = static_cast<unsigned>(q.rows);
  SATURN_DISPATCH_FLOAT(q.dtype, "rope_kv_write", {
    // Whole vectors in half a head make every row (a whole number of heads) whole vectors.
    const bool vec = CanVectorize(head_dim / 2, sizeof(scalar_t),
                                  {q.data, k.data, v.data, k_cache.data, v_cache.data});
    auto* kernel = vec ? &RopeKvWriteKernel<scalar_t, true> : &RopeKvWriteKernel<scalar_t, false>;
    kernel<<<blocks, threads, 0, s>>>(q.as<scalar_t>(), k.as<scalar_t>(), v.as<scalar_t>(),
                                      positions.as<int32_t>(), slot_mapping.as<int32_t>(),
                                      k_cache.as<scalar_t>(), v_cache.as<scalar_t>(), a);
    CUDA_CHECK_LAUNCH("RopeKvWriteKernel");
    RecordLaunch(KernelFamily::kRopeKvWrite, reinterpret_cast<const void*>(kernel), q.rows, threads,
                 0);
    return absl::OkStatus();
  })
}

}  // namespace saturn::gpu
