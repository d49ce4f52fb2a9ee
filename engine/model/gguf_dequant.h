// The ggml tensor types Saturn reads from GGUF files, their block sizes, and dequantization to
// f32, block for block as llama.cpp's ggml-quants.c defines them:
//   F32, F16, BF16                      one value per element
//   Q8_0  (34 bytes / 32 values)        f16 scale d, 32 x int8:          x = d q
//   Q4_0  (18 bytes / 32 values)        f16 d, 16 bytes of nibbles:      x = d (q - 8), low
//                                       nibbles the first 16 values, high ones the next 16
//   Q4_K  (144 bytes / 256 values)      f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for
//                                       8 sub-blocks, 128 bytes of nibbles: x = d sc q - dmin m
//   Q6_K  (210 bytes / 256 values)      128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8
//                                       scales, f16 d: x = d sc (q - 32)
// Any other type is refused by the loader naming the tensor and the type.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace saturn {

enum GgmlType : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ4_0 = 2,
  kGgmlQ8_0 = 8,
  kGgmlQ4_K = 12,
  kGgmlQ6_K = 14,
  kGgmlBF16 = 30,
};

struct GgmlTypeInfo {
  const char* name = nullptr;  // null: a type Saturn does not read
  int block_values = 0;        // values per block
  int block_bytes = 0;         // bytes per block
};
// The type's layout (name null for a type Saturn does not read), and a name for any id
// (ggml's, e.g. "q5_K", or "unknown").
GgmlTypeInfo GgmlTypeOf(uint32_t type);
const char* GgmlTypeName(uint32_t type);

// Dequantizes `count` values (a multiple of the type's block) from `src` into `dst`.
absl::Status Dequantize(uint32_t type, absl::Span<const uint8_t> src, int64_t count, float* dst);

}  // namespace saturn
