// A non-owning 2-D view of device (or host) memory, row-major and contiguous. Every op in
// kernels/ takes these. Owns nothing; DeviceBuffer (kernels/backend.h) owns memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/enum_table.h"

namespace saturn {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kCount };

// Bytes per element and name of each dtype, in enum order (kernels/enum_table.h).
inline constexpr std::array kDTypeSizes{size_t{4}, size_t{2}, size_t{2}, size_t{4}, size_t{8}};
inline constexpr std::array kDTypeNames{"f32", "bf16", "f16", "i32", "i64"};

inline size_t DTypeSize(DType t) { return EnumLookup(kDTypeSizes, t, size_t{0}); }
inline const char* DTypeName(DType t) { return EnumLookup(kDTypeNames, t, "?"); }

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
