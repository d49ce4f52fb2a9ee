// When a memory-bound CUDA kernel may take its 16-byte vector path: the row width in bytes is
// a whole number of 16-byte vectors and every base pointer is 16-byte aligned. Checked on the
// host at every launch, because DeviceBuffer::View and Tensor::RowSlice allow any byte offset;
// otherwise the kernel's scalar path runs. Host-only and free of CUDA headers, so a CPU test
// can check the rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace saturn::gpu {

constexpr size_t kVectorBytes = 16;

inline bool CanVectorize(int64_t cols, size_t elem_bytes, std::initializer_list<const void*> ptrs) {
  if (cols <= 0 || elem_bytes == 0 ||
      (static_cast<size_t>(cols) * elem_bytes) % kVectorBytes != 0) {
    return false;
  }
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % kVectorBytes != 0) return false;
  }
  return true;
}

}  // namespace saturn::gpu
