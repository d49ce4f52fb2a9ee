// The CPU kernels built for AVX2 + FMA: attention_tile.inc, gemm_skinny.inc and gemm_blocked.inc
// over simd16.inc's two-__m256 V. Only called where DetectCpuFeatures().avx2_fma.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/isa_target.h"

SATURN_TARGET_PUSH("avx2,fma,f16c")

namespace saturn::cpu::isa_avx2 {
#define SATURN_SIMD_AVX2
// Accumulators per level (16 ymm, two per V): attention keys per scoring pass by lane-vector count,
// attention rows per PV pass, skinny weight x input rows, blocked micro-kernel rows.
constexpr int kKeysPerPass[5] = {1, 4, 2, 1, 1};
constexpr int kPvRows = 1;
constexpr int kSkinnyWeightRows = 4, kSkinnyInputRows = 1;
// 4 x 4 skinny tiles (16 accumulators, 4 + 4 live loads): only where 32 registers hold them.
constexpr bool kSkinnyQuadTiles = false;
constexpr int kGemmRows = 2;
// Quantized GEMM tiles (gemm_quant.inc): weight rows streamed at M = 1; weight x input rows.
constexpr int kQuantStreamRows = 3, kQuantWeightRows = 2, kQuantInputRows = 2;
#include "kernels/cpu/isa_entry.inc"
#undef SATURN_SIMD_AVX2

}  // namespace saturn::cpu::isa_avx2

SATURN_TARGET_POP
#endif  // __x86_64__
