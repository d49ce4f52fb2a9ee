// Run-time CPU feature detection (GCC/Clang __builtin_cpu_supports, which also checks that
// the OS saves the vector state) and the kernel-level helpers of cpu_features.h.
#include "kernels/cpu/cpu_features.h"

namespace saturn::cpu {

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512 = f.avx2_fma && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
#endif
    return f;
  }();
  return features;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa BestIsa() {
  const CpuFeatures& f = DetectCpuFeatures();
  if (f.avx512) return Isa::kAvx512;
  if (f.avx2_fma) return Isa::kAvx2;
  return Isa::kScalar;
}

bool IsaSupported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(BestIsa()); }

bool HasNativeBf16() {
  const CpuFeatures& f = DetectCpuFeatures();
  return f.avx512_bf16 || f.amx_bf16;
}

std::string CpuFeatureSummary() {
  const CpuFeatures& f = DetectCpuFeatures();
  std::string s = IsaName(BestIsa());
  if (f.avx512_bf16) s += " +avx512_bf16";
  if (f.amx_bf16) s += " +amx_bf16";
  return s;
}

}  // namespace saturn::cpu
