// Host memory that a GEMM streams (weights, the KV cache, the planner's synthetic probes) and
// its cache state.
//
// Buffers of a huge page or more start on a huge-page boundary and ask the kernel for
// transparent huge pages (madvise(MADV_HUGEPAGE), honoured where
// /sys/kernel/mm/transparent_hugepage/enabled says "always" or "madvise"). A decode step reads
// every weight once; on 4 KiB pages that stream walks a page-table entry (two levels of them
// in a VM) every 4 KiB, on huge pages every 2 MiB, and streams slower (docs/CPU.md). Where THP
// is off the hint is ignored and the buffer is plain memory.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace saturn::cpu {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64 and arm64 with 4 KiB pages

// At least `bytes` (and at least 64) of uninitialised memory: huge-page aligned with the THP
// hint when bytes >= kHugePageBytes, else 64-byte aligned; nullptr when out of memory. Free
// with std::free. Pages are committed on first touch, so whoever writes them first decides
// where they live.
void* AllocateStreamed(size_t bytes);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
// AllocateStreamed's buffer as `count` values of T (trivially copyable), uninitialised.
template <typename T>
std::unique_ptr<T[], FreeDeleter> StreamedArray(size_t count) {
  return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(AllocateStreamed(count * sizeof(T))));
}

// A thread's growing scratch for kernels that load whole cache lines or AMX tile rows from it:
// 64-byte aligned (a std::vector's buffer is 16-byte aligned, so a 64-byte row may straddle
// two cache lines or not, by the process's heap, and AMX GEMMs ran at one of two speeds from
// one process to the next: docs/CPU.md, Memory). Old contents are not kept when it grows;
// throws std::bad_alloc as a vector would.
template <typename T>
class AlignedScratch {
 public:
  T* Get(size_t n) {
    if (n > cap_) {
      buf_ = StreamedArray<T>(n);
      if (buf_ == nullptr) {
        cap_ = 0;
        throw std::bad_alloc();
      }
      cap_ = n;
    }
    return buf_.get();
  }

 private:
  std::unique_ptr<T[], FreeDeleter> buf_;
  size_t cap_ = 0;
};

// Writes [p, p + bytes) back and drops it from every cache level, so the next read streams it
// from memory, as a decode step streams its weights. A probe timed on a buffer that fits in
// the last-level cache otherwise measures that cache, which on a VM may report hundreds of MiB
// (docs/CPU.md). clflushopt where the CPU has it, clflush (an order of magnitude slower) on
// older x86, dc civac on arm64; elsewhere nothing.
void EvictFromCache(const void* p, size_t bytes);

}  // namespace saturn::cpu
