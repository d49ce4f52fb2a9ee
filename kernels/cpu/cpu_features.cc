// Run-time CPU feature detection (GCC/Clang __builtin_cpu_supports, which also checks that
// the OS saves the vector state) and the kernel-level helpers of cpu_features.h.
#include "kernels/cpu/cpu_features.h"

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/enum_table.h"

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
  static constexpr std::array kNames{"scalar", "avx2", "avx512"};  // Isa's order
  return EnumLookup(kNames, isa, "?");
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

// The largest cache level cpu0 sees, from sysfs (what the kernel was told by the CPU's cache
// topology leaves); sysconf only where sysfs has none. glibc's sysconf can report the whole
// package's L3 (here 384 MiB on a VM whose one L3 holds 32 MiB), which would call a 300 MB
// model cache-resident.
size_t LastLevelCacheBytes() {
  double best = 0;
  int best_level = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level");
    if (!level_file) break;
    std::ifstream type_file(dir + "type"), size_file(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction") continue;
    double bytes = std::atof(size.c_str());
    const char unit = size.back();
    if (unit == 'K') bytes *= 1024;
    if (unit == 'M') bytes *= 1024 * 1024;
    if (unit == 'G') bytes *= 1024.0 * 1024 * 1024;
    if (level > best_level || (level == best_level && bytes > best)) {
      best_level = level;
      best = bytes;
    }
  }
  if (best > 0) return static_cast<size_t>(best);
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l3 > 0 ? static_cast<size_t>(l3) : 0;
}

}  // namespace saturn::cpu
