// Elementwise and data-movement ops on the CPU: Add (f32), GatherRows and Copy (any dtype,
// moved as bytes). Large copies are split across the pool so calibration sees the
// bandwidth of all threads.
#include <cstring>

#include "kernels/cpu/ops.h"

namespace saturn::cpu {

absl::Status Add(ThreadPool& pool, const Tensor& a, const Tensor& b, const Tensor& out) {
  for (auto [name, t] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"out", &out}}) {
    if (absl::Status s = ExpectF32(name, *t); !s.ok()) return s;
  }
  const float* pa = a.as<float>();
  const float* pb = b.as<float>();
  float* po = out.as<float>();
  pool.ParallelFor(a.numel(), 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) po[i] = pa[i] + pb[i];
  });
  return absl::OkStatus();
}

absl::Status GatherRows(ThreadPool& pool, const Tensor& x, const Tensor& indices,
                        const Tensor& out) {
  const int32_t* idx = indices.as<int32_t>();
  for (int64_t i = 0; i < out.rows; ++i) {
    if (idx[i] < 0 || idx[i] >= x.rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("index ", idx[i], " at position ", i, " is outside x's ", x.rows, " rows"));
    }
  }
  const size_t row_bytes = static_cast<size_t>(x.cols) * DTypeSize(x.dtype);
  pool.ParallelFor(out.rows, RowGrain(x.cols), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(static_cast<char*>(out.data) + i * row_bytes,
                  static_cast<const char*>(x.data) + static_cast<int64_t>(idx[i]) * row_bytes,
                  row_bytes);
    }
  });
  return absl::OkStatus();
}

absl::Status Copy(ThreadPool& pool, const Tensor& src, const Tensor& dst) {
  const int64_t bytes = static_cast<int64_t>(src.bytes());
  if (bytes == 0 || src.data == dst.data) return absl::OkStatus();
  pool.ParallelFor(bytes, 1 << 18, [&](int64_t begin, int64_t end) {
    std::memcpy(static_cast<char*>(dst.data) + begin, static_cast<const char*>(src.data) + begin,
                end - begin);
  });
  return absl::OkStatus();
}

absl::Status Zero(ThreadPool& pool, const Tensor& dst) {
  pool.ParallelFor(static_cast<int64_t>(dst.bytes()), 1 << 20, [&](int64_t begin, int64_t end) {
    std::memset(static_cast<char*>(dst.data) + begin, 0, end - begin);
  });
  return absl::OkStatus();
}

}  // namespace saturn::cpu
