// KV cache write on the CPU: k_cache[slot[t], :] = k[t, :], same for v. Rows are copied as
// bytes where k/v and the caches share a dtype, and rounded to bf16 (to nearest, ties to
// even, as every bf16 conversion here) where f32 rows go to a bf16 cache. Slots are
// range-checked first so a bad slot writes nothing.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/half_float.h"

namespace saturn::cpu {

absl::Status KvWrite(ThreadPool& pool, const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                     const Tensor& k_cache, const Tensor& v_cache) {
  const bool same = k.dtype == k_cache.dtype;
  const bool to_bf16 = k.dtype == DType::kF32 && k_cache.dtype == DType::kBF16;
  if (k.dtype != v.dtype || k_cache.dtype != v_cache.dtype || !(same || to_bf16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "k/v dtypes (", DTypeName(k.dtype), ", ", DTypeName(v.dtype), ") do not fit the caches (",
        DTypeName(k_cache.dtype), ", ", DTypeName(v_cache.dtype),
        "): the caches take the rows' own dtype, or bf16 for f32 rows"));
  }
  const int32_t* slot = slot_mapping.as<int32_t>();
  const int64_t cache_rows = std::min(k_cache.rows, v_cache.rows);
  for (int64_t t = 0; t < k.rows; ++t) {
    if (slot[t] < 0 || slot[t] >= cache_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot ", slot[t], " for token ", t, " is outside the cache of ", cache_rows, " rows"));
    }
  }
  const int64_t cols = k.cols;
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(k.dtype);
  const size_t cache_row_bytes = static_cast<size_t>(cols) * DTypeSize(k_cache.dtype);
  const auto write = [&](const Tensor& src, const Tensor& cache, int64_t t) {
    const char* from = static_cast<const char*>(src.data) + t * row_bytes;
    char* to = static_cast<char*>(cache.data) + static_cast<size_t>(slot[t]) * cache_row_bytes;
    if (same) {
      std::memcpy(to, from, row_bytes);
      return;
    }
    const float* f = reinterpret_cast<const float*>(from);
    uint16_t* h = reinterpret_cast<uint16_t*>(to);
    for (int64_t c = 0; c < cols; ++c) h[c] = F32ToBf16(f[c]);
  };
  pool.ParallelFor(k.rows, RowGrain(2 * k.cols), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      write(k, k_cache, t);
      write(v, v_cache, t);
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
