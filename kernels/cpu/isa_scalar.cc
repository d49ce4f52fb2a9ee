// The CPU kernels in portable C++ (simd16.inc's 16-float array V, which the compiler
// vectorises for the baseline target), the fallback for CPUs without AVX2, and the
// KernelsFor() table that picks a level at run time.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa_kernels.h"

namespace saturn::cpu {
namespace isa_scalar {
#define SATURN_SIMD_SCALAR
// Accumulators per level (no vector registers): attention keys per scoring pass by lane-vector
// count, attention rows per PV pass, skinny weight x input rows, blocked micro-kernel rows.
constexpr int kKeysPerPass[5] = {1, 1, 1, 1, 1};
constexpr int kPvRows = 1;
constexpr int kSkinnyWeightRows = 4, kSkinnyInputRows = 1;
// 4 x 4 skinny tiles (16 accumulators, 4 + 4 live loads): only where 32 registers hold them.
constexpr bool kSkinnyQuadTiles = false;
constexpr int kGemmRows = 4;
constexpr int kQuantStreamRows = 4, kQuantWeightRows = 4, kQuantInputRows = 1;
#include "kernels/cpu/isa_entry.inc"
#undef SATURN_SIMD_SCALAR
}  // namespace isa_scalar

#define SATURN_DECLARE_ISA(ns)                                            \
  namespace ns {                                                          \
  void AttendTile(const AttnTile& t, float* scratch);                     \
  void SwiGluRow(const float* g, const float* u, float* o, int64_t n);    \
  void SkinnyF32(const GemmArgs& a, int64_t b, int64_t e);                \
  void SkinnyBf16(const GemmArgs& a, int64_t b, int64_t e);               \
  void BlockedF32(const GemmArgs& a, int64_t b, int64_t e, float* pack);  \
  void BlockedBf16(const GemmArgs& a, int64_t b, int64_t e, float* pack); \
  void PanelsF32(const GemmArgs& a, int64_t b, int64_t e);                \
  void QuantQ8_0(const GemmArgs& a, int64_t b, int64_t e);                \
  void QuantQ4_0(const GemmArgs& a, int64_t b, int64_t e);                \
  }
#if defined(__x86_64__)
SATURN_DECLARE_ISA(isa_avx2)
SATURN_DECLARE_ISA(isa_avx512)
#endif
#undef SATURN_DECLARE_ISA

const IsaKernels& KernelsFor(Isa isa) {
  static const IsaKernels kScalar{Isa::kScalar,
                                  isa_scalar::AttendTile,
                                  isa_scalar::SwiGluRow,
                                  isa_scalar::SkinnyF32,
                                  isa_scalar::SkinnyBf16,
                                  isa_scalar::BlockedF32,
                                  isa_scalar::BlockedBf16,
                                  isa_scalar::PanelsF32,
                                  isa_scalar::QuantQ8_0,
                                  isa_scalar::QuantQ4_0};
#if defined(__x86_64__)
  static const IsaKernels kAvx2{
      Isa::kAvx2,           isa_avx2::AttendTile, isa_avx2::SwiGluRow,   isa_avx2::SkinnyF32,
      isa_avx2::SkinnyBf16, isa_avx2::BlockedF32, isa_avx2::BlockedBf16, isa_avx2::PanelsF32,
      isa_avx2::QuantQ8_0,  isa_avx2::QuantQ4_0};
  static const IsaKernels kAvx512{Isa::kAvx512,
                                  isa_avx512::AttendTile,
                                  isa_avx512::SwiGluRow,
                                  isa_avx512::SkinnyF32,
                                  isa_avx512::SkinnyBf16,
                                  isa_avx512::BlockedF32,
                                  isa_avx512::BlockedBf16,
                                  isa_avx512::PanelsF32,
                                  isa_avx512::QuantQ8_0,
                                  isa_avx512::QuantQ4_0};
  switch (isa) {
    case Isa::kAvx512:
      return kAvx512;
    case Isa::kAvx2:
      return kAvx2;
    case Isa::kScalar:
    case Isa::kCount:
      break;
  }
#endif
  (void)isa;
  return kScalar;
}

}  // namespace saturn::cpu
