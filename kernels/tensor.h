// A non-owning 2-D view of device (or host) memory, row-major and contiguous. Every op in
// kernels/ takes these. Owns nothing; DeviceBuffer (kernels/backend.h) owns memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace saturn {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64 };

inline size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  return 0;
}

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
  }
  return "?";
}

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t numel() const { return rows * cols; }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, begin + count) as a view.
  Tensor RowSlice(int64_t begin, int64_t count) const {
    return Tensor{static_cast<char*>(data) + begin * cols * DTypeSize(dtype), dtype, count, cols};
  }
  // The same memory seen with another 2-D shape of equal element count.
  Tensor Reshaped(int64_t r, int64_t c) const { return Tensor{data, dtype, r, c}; }
  std::string ShapeString() const {
    return std::string(DTypeName(dtype)) + "[" + std::to_string(rows) + ", " +
           std::to_string(cols) + "]";
  }
};

}  // namespace saturn
