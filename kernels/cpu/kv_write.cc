// KV cache write on the CPU: k_cache[slot[t], :] = k[t, :], same for v. Rows are copied as
// bytes (any dtype, as long as k/v and the caches agree); slots are range-checked first so a
// bad slot writes nothing.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace saturn::cpu {

absl::Status KvWrite(ThreadPool& pool, const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                     const Tensor& k_cache, const Tensor& v_cache) {
  if (k.dtype != k_cache.dtype || v.dtype != v_cache.dtype || k.dtype != v.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "k/v dtypes (", DTypeName(k.dtype), ", ", DTypeName(v.dtype), ") differ from the caches (",
        DTypeName(k_cache.dtype), ", ", DTypeName(v_cache.dtype), ")"));
  }
  const int32_t* slot = slot_mapping.as<int32_t>();
  const int64_t cache_rows = std::min(k_cache.rows, v_cache.rows);
  for (int64_t t = 0; t < k.rows; ++t) {
    if (slot[t] < 0 || slot[t] >= cache_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot ", slot[t], " for token ", t, " is outside the cache of ", cache_rows, " rows"));
    }
  }
  const size_t row_bytes = static_cast<size_t>(k.cols) * DTypeSize(k.dtype);
  pool.ParallelFor(k.rows, RowGrain(2 * k.cols), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const size_t dst = static_cast<size_t>(slot[t]) * row_bytes;
      std::memcpy(static_cast<char*>(k_cache.data) + dst,
                  static_cast<const char*>(k.data) + t * row_bytes, row_bytes);
      std::memcpy(static_cast<char*>(v_cache.data) + dst,
                  static_cast<const char*>(v.data) + t * row_bytes, row_bytes);
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
