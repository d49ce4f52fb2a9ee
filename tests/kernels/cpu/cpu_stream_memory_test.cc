// kernels/cpu/stream_memory.h: where streamed buffers start, that they ask for huge pages
// (where the kernel offers them), and that evicting them from the caches keeps their bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/cpu/stream_memory.h"

namespace saturn::cpu {
namespace {

// The THP mode in brackets, e.g. "madvise"; "" where sysfs has no such file.
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos
             ? ""
             : line.substr(open + 1, close - open - 1);
}

// The THPeligible field of the /proc/self/smaps mapping that holds `p` (-1: not found).
int ThpEligible(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    int v = 0;
    if (inside && std::sscanf(line.c_str(), "THPeligible: %d", &v) == 1) return v;
  }
  return -1;
}

TEST(StreamMemory, LargeBuffersStartOnAHugePageSmallOnesOnACacheLine) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, kHugePageBytes - 1}) {
    auto a = StreamedArray<char>(bytes);
    ASSERT_NE(a, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u) << bytes;
  }
  for (size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 5 * kHugePageBytes + 4096}) {
    auto a = StreamedArray<char>(bytes);
    ASSERT_NE(a, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % kHugePageBytes, 0u) << bytes;
    a[bytes - 1] = 1;  // all of it is ours
  }
}

TEST(StreamMemory, LargeBuffersAskForTransparentHugePages) {
  const std::string mode = ThpMode();
  if (mode != "always" && mode != "madvise") {
    GTEST_SKIP() << "transparent huge pages are \"" << mode << "\" here: nothing to ask for";
  }
  auto a = StreamedArray<char>(4 * kHugePageBytes);
  ASSERT_NE(a, nullptr);
  const int eligible = ThpEligible(a.get());
  if (eligible < 0) GTEST_SKIP() << "this kernel's smaps has no THPeligible field";
  EXPECT_EQ(eligible, 1);
}

TEST(StreamMemory, EvictingKeepsTheBytes) {
  const size_t n = 3 * kHugePageBytes / 4 + 7;
  auto a = StreamedArray<uint32_t>(n);
  ASSERT_NE(a, nullptr);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint32_t>(i * 2654435761u);
  EvictFromCache(a.get(), n * sizeof(uint32_t));
  EvictFromCache(reinterpret_cast<const char*>(a.get()) + 3, 61);  // an unaligned span
  EvictFromCache(nullptr, 100);                                    // nothing to do
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], static_cast<uint32_t>(i * 2654435761u)) << i;
}

}  // namespace
}  // namespace saturn::cpu
