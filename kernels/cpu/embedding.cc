// Embedding lookup on the CPU: out[t, :] = table[ids[t], :]. Rows are copied as bytes, so
// any table dtype works; ids are range-checked before anything is written. A table in 32-row
// panels (tensor.h: Layout::kPanels, where a tied LM head shares it with the GEMM) is read
// one column of a panel at a time: a row's elements lie 32 floats apart there.
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
  if (table.layout == Layout::kPanels) {
    const int64_t d = table.cols;
    const float* src = table.as<float>();
    float* dst = out.as<float>();
    pool.ParallelFor(n, RowGrain(d), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t panel = id[t] / kPanelRows, lane = id[t] % kPanelRows;
        const float* col = src + panel * kPanelRows * d + lane;
        for (int64_t c = 0; c < d; ++c) dst[t * d + c] = col[c * kPanelRows];
      }
    });
    return absl::OkStatus();
  }
  if (table.layout != Layout::kRows) {
    return absl::UnimplementedError(
        absl::StrCat("table is ", table.ShapeString(), ", which the CPU embedding cannot read"));
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
