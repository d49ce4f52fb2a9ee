// Run-time CPU feature detection (GCC/Clang __builtin_cpu_supports, which also checks that
// the OS saves the vector state) and the kernel-level helpers of cpu_features.h.
#include "kernels/cpu/cpu_features.h"

#include <unistd.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <sys/syscall.h>
#endif

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/base/enum_table.h"

namespace saturn::cpu {
namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// AMX-BF16 and AMX-TILE from CPUID leaf 7 (read directly: GCC 12's __builtin_cpu_supports
// knows them, clang 14's does not), then whether this process may use the tiles: the OS
// must save the tile state (XCR0 bits 17 and 18) and, on Linux, grant the tile data to the
// process (ARCH_REQ_XCOMP_PERM; without it the first tile instruction raises SIGILL).
void DetectAmx(CpuFeatures& f) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return;
  f.amx_bf16 = ((d >> 22) & 1) != 0 && ((d >> 24) & 1) != 0;
  if (!f.amx_bf16) return;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (__get_cpuid(1, &a1, &b1, &c1, &d1) == 0 || ((c1 >> 27) & 1) == 0) {
    f.amx_note = "the OS has not enabled XSAVE";
    return;
  }
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) {
    f.amx_note = "the OS does not save the tile state (XCR0)";
    return;
  }
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXtileData = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXtileData) != 0) {
    f.amx_note = "the kernel refused the tile data (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return;
  }
  uint64_t granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 ||
      ((granted >> kXtileData) & 1) == 0) {
    f.amx_note = "the kernel did not grant the tile data";
    return;
  }
  f.amx_usable = f.avx512;  // the kernel packs with AVX-512
  if (!f.amx_usable) f.amx_note = "no AVX-512 to pack the tiles with";
}
#endif

}  // namespace

namespace {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// CPUID bits that __builtin_cpu_supports does not name in every compiler Saturn builds with
// (clang 14 knows neither "f16c" nor, in some versions, "avx512vnni").
bool CpuidBit(unsigned leaf, unsigned subleaf, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (__get_cpuid_count(leaf, subleaf, &r[0], &r[1], &r[2], &r[3]) == 0) return false;
  return ((r[reg] >> bit) & 1) != 0;
}
constexpr int kEcx = 2;
#endif
}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                 CpuidBit(1, 0, kEcx, 29);  // F16C
    f.avx512 = f.avx2_fma && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
    f.avx512_vnni = f.avx512 && CpuidBit(7, 0, kEcx, 11);  // AVX512_VNNI
    DetectAmx(f);
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
  return f.avx512_bf16 || f.amx_usable;
}

std::string CpuFeatureSummary() {
  const CpuFeatures& f = DetectCpuFeatures();
  std::string s = IsaName(BestIsa());
  if (f.avx512_bf16) s += " +avx512_bf16";
  if (f.avx512_vnni) s += " +avx512_vnni";
  if (f.amx_usable) s += " +amx_bf16";
  if (f.amx_bf16 && !f.amx_usable) s += " (amx_bf16 unusable: " + f.amx_note + ")";
  return s;
}

namespace {

// cpu0's data (and unified) caches from sysfs (what the kernel was told by the CPU's cache
// topology leaves): {level, bytes} per cache, in sysfs order.
std::vector<std::pair<int, double>> DataCaches() {
  std::vector<std::pair<int, double>> caches;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level");
    if (!level_file) break;
    std::ifstream type_file(dir + "type"), size_file(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction" || size.empty()) continue;
    double bytes = std::atof(size.c_str());
    const char unit = size.back();
    if (unit == 'K') bytes *= 1024;
    if (unit == 'M') bytes *= 1024 * 1024;
    if (unit == 'G') bytes *= 1024.0 * 1024 * 1024;
    caches.emplace_back(level, bytes);
  }
  return caches;
}

}  // namespace

// The largest cache level cpu0 sees, from sysfs; sysconf only where sysfs has none. glibc's
// sysconf can report the whole package's L3 (here 384 MiB on a VM whose one L3 holds 32 MiB),
// which would call a 300 MB model cache-resident.
size_t LastLevelCacheBytes() {
  double best = 0;
  int best_level = 0;
  for (const auto& [level, bytes] : DataCaches()) {
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

size_t CacheBytes(int level) {
  double bytes = 0;
  for (const auto& [l, b] : DataCaches()) {
    if (l == level) bytes = std::max(bytes, b);
  }
  if (bytes > 0) return static_cast<size_t>(bytes);
  const long s = level == 1   ? sysconf(_SC_LEVEL1_DCACHE_SIZE)
                 : level == 2 ? sysconf(_SC_LEVEL2_CACHE_SIZE)
                 : level == 3 ? sysconf(_SC_LEVEL3_CACHE_SIZE)
                              : 0;
  return s > 0 ? static_cast<size_t>(s) : 0;
}

}  // namespace saturn::cpu
