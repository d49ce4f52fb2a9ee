// What the running CPU can execute, detected once at run time, and the instruction-set
// levels the CPU backend's kernels are built for (kernels/cpu/isa_*.cc). Kernels never
// assume a feature at compile time; the backend picks the best level the CPU has, and tests
// may force a lower one to check every path on one machine.
#pragma once

#include <cstddef>
#include <string>

namespace saturn::cpu {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 + FMA3 (and F16C, which every AVX2 CPU has)
  bool avx512 = false;       // AVX-512 F, BW, VL and DQ (and the OS saves the zmm state)
  bool avx512_bf16 = false;  // vdpbf16ps / vcvtne2ps2bf16
  bool avx512_vnni = false;  // vpdpbusd (int8 dot products: the q8_0 / q4_0 GEMM's)
  bool amx_bf16 = false;     // the CPU has AMX tiles with bf16 (CPUID)
  // AMX can run here: the CPU has it, the OS saves the tile state (XCR0) and granted this
  // process the tile data (Linux arch_prctl(ARCH_REQ_XCOMP_PERM), requested at detection).
  bool amx_usable = false;
  std::string amx_note;  // why AMX is not usable, where the CPU has it ("" otherwise)
};

// Detected once per process.
const CpuFeatures& DetectCpuFeatures();

// Kernel levels, each a superset of the one before.
enum class Isa { kScalar, kAvx2, kAvx512, kCount };

const char* IsaName(Isa isa);
// The best level this CPU runs.
Isa BestIsa();
// True when this CPU can run kernels built for `isa`.
bool IsaSupported(Isa isa);
// True when the CPU has native bf16 dot products (AVX512-BF16, or AMX-BF16 it may use): where bf16
// weights are the default.
bool HasNativeBf16();
// e.g. "avx512 (avx512_bf16)" for logs and device names.
std::string CpuFeatureSummary();
// Bytes of the largest data cache cpu0 sees (sysfs cache topology; sysconf only where sysfs
// has none; 0 when neither knows).
size_t LastLevelCacheBytes();
// Bytes of cpu0's data (or unified) cache at `level` (1, 2, 3), the same way; 0 when unknown.
size_t CacheBytes(int level);

}  // namespace saturn::cpu
