// The CPU kernels built for AVX-512 (F, BW, VL, DQ): attention_tile.inc, gemm_skinny.inc and
// gemm_blocked.inc over simd16.inc's one-__m512 V. Only called where DetectCpuFeatures().avx512.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/isa_target.h"

SATURN_TARGET_PUSH("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace saturn::cpu::isa_avx512 {
#define SATURN_SIMD_AVX512
// Accumulators per level (32 zmm): attention keys per scoring pass by lane-vector count,
// attention rows per PV pass, skinny weight x input rows, blocked micro-kernel rows.
constexpr int kKeysPerPass[5] = {1, 8, 8, 6, 4};
constexpr int kPvRows = 2;
constexpr int kSkinnyWeightRows = 8, kSkinnyInputRows = 2;
// 4 x 4 skinny tiles (16 accumulators, 4 + 4 live loads): only where 32 registers hold them.
constexpr bool kSkinnyQuadTiles = true;
constexpr int kGemmRows = 12;
// Quantized GEMM tiles (gemm_quant.inc): weight rows streamed at M = 1; weight x input rows.
constexpr int kQuantStreamRows = 8, kQuantWeightRows = 4, kQuantInputRows = 4;
#include "kernels/cpu/isa_entry.inc"
#undef SATURN_SIMD_AVX512

}  // namespace saturn::cpu::isa_avx512

SATURN_TARGET_POP
#endif  // __x86_64__
