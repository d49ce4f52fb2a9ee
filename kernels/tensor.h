// A non-owning 2-D view of device (or host) memory, row-major and contiguous. Every op in
// kernels/ takes these. Owns nothing; DeviceBuffer (kernels/backend.h) owns memory.
// One exception: a GEMM weight may sit in a backend's own layout (Backend::GemmWeightLayout),
// which only that backend's GEMMs read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/base/enum_table.h"

namespace saturn {

// kQ8_0 and kQ4_0 are block-quantized GEMM weights in llama.cpp's (ggml's) formats, 32
// weights a block, each row a whole number of blocks:
//  - q8_0, 34 bytes: an f16 scale d, then 32 int8 q; weight i = d * q[i].
//  - q4_0, 18 bytes: an f16 scale d, then 16 bytes of nibbles; weight i (i < 16) = d * ((byte
//    i & 15) - 8), weight 16 + i = d * ((byte i >> 4) - 8).
enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kQ8_0, kQ4_0, kCount };

// Per dtype, in enum order (kernels/base/enum_table.h): bytes of one block, elements in a
// block (1 for element types), name.
inline constexpr std::array kDTypeBlockBytes{size_t{4}, size_t{2},  size_t{2}, size_t{4},
                                             size_t{8}, size_t{34}, size_t{18}};
inline constexpr std::array kDTypeBlockElems{int64_t{1}, int64_t{1},  int64_t{1}, int64_t{1},
                                             int64_t{1}, int64_t{32}, int64_t{32}};
inline constexpr std::array kDTypeNames{"f32", "bf16", "f16", "i32", "i64", "q8_0", "q4_0"};

inline int64_t DTypeBlockElems(DType t) { return EnumLookup(kDTypeBlockElems, t, int64_t{1}); }
inline bool IsBlockQuantized(DType t) { return DTypeBlockElems(t) > 1; }
// Bytes per element; 0 for the block-quantized types, whose rows DTypeRowBytes sizes.
inline size_t DTypeSize(DType t) {
  return IsBlockQuantized(t) ? 0 : EnumLookup(kDTypeBlockBytes, t, size_t{0});
}
// Bytes of a row of `cols` elements (block types: cols a multiple of the block).
inline size_t DTypeRowBytes(DType t, int64_t cols) {
  return static_cast<size_t>(cols / DTypeBlockElems(t)) *
         EnumLookup(kDTypeBlockBytes, t, size_t{0});
}
// Bytes per element on average (q8_0: 34 / 32), what a stream of weights reads.
inline double DTypeBytesPerElement(DType t) {
  return static_cast<double>(EnumLookup(kDTypeBlockBytes, t, size_t{0})) /
         static_cast<double>(DTypeBlockElems(t));
}
inline const char* DTypeName(DType t) { return EnumLookup(kDTypeNames, t, "?"); }

// kRows: row-major and contiguous. Two packed layouts of GEMM weights on the CPU backend, both
// in panels of 32 rows (rows zero-padded to a multiple of 32), panel after panel, so that a
// GEMM reads its weights as one sequential stream in the order its products use them:
//  - kAmxTiles (bf16 where Intel AMX runs, kernels/cpu/gemm/gemm_amx.cc): columns zero-padded
//    to a multiple of 32 too; each panel k block by k block (32 columns), each block as two
//    1 KiB AMX B tiles (rows 0-15, then 16-31) in the VNNI order (tile row p: the 16 rows'
//    pairs of columns 2p, 2p + 1).
//  - kPanels (f32 at the AVX-512 level, kernels/cpu/gemm/gemm_blocked.inc): each panel
//    column-major, [cols][32], the blocked GEMM's packed panel for the whole of k. A panel
//    starts where its first row would in kRows.
//  - kQuantPanels (q8_0 and q4_0 at the AVX-512 level with VNNI, kernels/cpu/gemm/
//    gemm_quant_vnni.cc): each panel k block by k block, each block as the 32 rows' f16 scales
//    (64 bytes), then their integers four columns at a time, rows 0-15 then 16-31 (64 bytes
//    each: row r's four bytes at 4r), the operand order of vpdpbusd: q8_0's integers plus 128
//    (unsigned), chunks of columns 4j..4j+3 for j < 8; q4_0's bytes as ggml stores them (low
//    nibble column i, high nibble column 16 + i), chunks 4j..4j+3 for j < 4. The same bytes per
//    row as kRows; a panel starts where its first row would.
enum class Layout : uint8_t { kRows, kAmxTiles, kPanels, kQuantPanels };
inline constexpr int64_t kPanelRows = 32;  // both packed layouts' panel height and padding
inline int64_t PanelPadded(int64_t n) { return (n + kPanelRows - 1) / kPanelRows * kPanelRows; }

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  Layout layout = Layout::kRows;

  int64_t numel() const { return rows * cols; }
  // The bytes it occupies (packed layouts: with their padding).
  size_t bytes() const {
    switch (layout) {
      case Layout::kAmxTiles:
        return static_cast<size_t>(PanelPadded(rows) * PanelPadded(cols)) * DTypeSize(dtype);
      case Layout::kPanels:
        return static_cast<size_t>(PanelPadded(rows) * cols) * DTypeSize(dtype);
      case Layout::kQuantPanels:
        return static_cast<size_t>(PanelPadded(rows)) * DTypeRowBytes(dtype, cols);
      case Layout::kRows:
        break;
    }
    return static_cast<size_t>(rows) * DTypeRowBytes(dtype, cols);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, begin + count) as a view (packed layouts: begin a multiple of 32, the view's
  // last panel may hold rows past count, which its GEMMs do not store).
  Tensor RowSlice(int64_t begin, int64_t count) const {
    const int64_t row_elems = layout == Layout::kAmxTiles ? PanelPadded(cols) : cols;
    return Tensor{static_cast<char*>(data) + begin * DTypeRowBytes(dtype, row_elems), dtype, count,
                  cols, layout};
  }
  // The same memory seen with another 2-D shape of equal element count (rows only).
  Tensor Reshaped(int64_t r, int64_t c) const { return Tensor{data, dtype, r, c}; }
  std::string ShapeString() const {
    return std::string(DTypeName(dtype)) + "[" + std::to_string(rows) + ", " +
           std::to_string(cols) + "]" +
           (layout == Layout::kAmxTiles      ? " in AMX tiles"
            : layout == Layout::kPanels      ? " in 32-row panels"
            : layout == Layout::kQuantPanels ? " in 32-row quantized panels"
                                             : "");
  }
};

}  // namespace saturn
