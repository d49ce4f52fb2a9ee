// Embedding lookup on the CPU: out[t, :] = table[ids[t], :]. Rows are copied as bytes, so
// any table dtype works; ids are range-checked before anything is written.
#include <cstring>

#include "kernels/cpu/ops.h"

namespace saturn::cpu {

absl::Status Embedding(ThreadPool& pool, const Tensor& ids, const Tensor& table,
                       const Tensor& out) {
  const int32_t* id = ids.as<int32_t>();
  const int64_t n = ids.cols;
  for (int64_t t = 0; t < n; ++t) {
    if (id[t] < 0 || id[t] >= table.rows) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id[t], " at position ", t,
                                                     " is outside the vocabulary of size ",
                                                     table.rows));
    }
  }
  const size_t row_bytes = static_cast<size_t>(table.cols) * DTypeSize(table.dtype);
  const char* src = static_cast<const char*>(table.data);
  char* dst = static_cast<char*>(out.data);
  pool.ParallelFor(n, RowGrain(table.cols), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(dst + t * row_bytes, src + static_cast<int64_t>(id[t]) * row_bytes, row_bytes);
    }
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
