// llama.cpp's block formats for GEMM weights (tensor.h: DType::kQ8_0, kQ4_0) on the host:
// rows of f32 weights quantized block by block with the rounding of ggml's reference
// quantizer (quantize_row_q8_0_ref, quantize_row_q4_0_ref), so a checkpoint quantized here and
// the same checkpoint quantized by llama.cpp hold the same bytes, and a GGUF file's own blocks,
// dequantized and quantized again, come back bit for bit; and the way back to f32.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace saturn {

// The format a model's LM head takes when its other GEMM weights are in `weights`: q8_0 under
// q4_0 (llama.cpp's quantizer gives output.weight a wider format than the layers, q6_K, which
// Saturn does not have: its logits are what sampling sees), else the same.
inline DType LmHeadDType(DType weights) { return weights == DType::kQ4_0 ? DType::kQ8_0 : weights; }

// dst = `rows` rows of `cols` weights from src (row-major f32) in `dtype` (q8_0 or q4_0), each
// row DTypeRowBytes(dtype, cols) bytes. INVALID_ARGUMENT where dtype is not a block type or
// cols is not a multiple of its block.
absl::Status QuantizeRows(DType dtype, const float* src, int64_t rows, int64_t cols, void* dst);

// The inverse: `rows` rows of `cols` weights of `dtype` at src into f32 dst (exact: each
// weight is an f16 scale times a small integer).
absl::Status DequantizeRows(DType dtype, const void* src, int64_t rows, int64_t cols, float* dst);

}  // namespace saturn
