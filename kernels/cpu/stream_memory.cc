#include "kernels/cpu/stream_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace saturn::cpu {
namespace {

constexpr size_t kLine = 64;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
bool HasClflushopt() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && ((b >> 23) & 1) != 0;
  }();
  return has;
}

__attribute__((target("clflushopt"))) void FlushOpt(const char* p, const char* end) {
  for (; p < end; p += kLine) _mm_clflushopt(const_cast<char*>(p));
  _mm_sfence();  // clflushopt is ordered only by fences
}

void Flush(const char* p, const char* end) {
  for (; p < end; p += kLine) _mm_clflush(p);
  _mm_mfence();
}
#endif

}  // namespace

void* AllocateStreamed(size_t bytes) {
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : kLine;
  // aligned_alloc wants a multiple of the alignment; zero bytes still gets a real pointer.
  const size_t rounded = std::max(align, (bytes + align - 1) / align * align);
  void* p = std::aligned_alloc(align, rounded);
  if (p != nullptr && align == kHugePageBytes) {
    (void)madvise(p, rounded, MADV_HUGEPAGE);  // a hint: refused or THP off, 4 KiB pages stay
  }
  return p;
}

void EvictFromCache(const void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return;
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kLine - 1};
  const char* begin = reinterpret_cast<const char*>(first);
  const char* end = static_cast<const char*>(p) + bytes;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (HasClflushopt()) {
    FlushOpt(begin, end);
  } else {
    Flush(begin, end);
  }
#elif defined(__aarch64__)
  for (; begin < end; begin += kLine) __asm__ volatile("dc civac, %0" : : "r"(begin) : "memory");
  __asm__ volatile("dsb ish" : : : "memory");
#else
  (void)begin;
  (void)end;
#endif
}

}  // namespace saturn::cpu
