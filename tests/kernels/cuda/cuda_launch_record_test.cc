// The launch table (kernels/cuda/launch_record.cc) under concurrent writers and readers, as
// when the engine thread launches while a diagnostics thread builds the occupancy report:
// every record read back is one whole launch. Host-only: runs without a device.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kernels/cuda/ops.h"

namespace saturn::gpu {
namespace {

TEST(LaunchRecordTest, RecordsStayWholeUnderConcurrentWritersAndReaders) {
  constexpr int kIters = 200000;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> torn{0}, reads{0};
  auto writer = [](int64_t base) {
    for (int64_t i = 1; i <= kIters; ++i) {
      const int64_t v = base + i;
      RecordLaunch(KernelFamily::kSample, reinterpret_cast<const void*>(v * 16), v,
                   static_cast<int>(v % 1024) + 1, static_cast<size_t>(v) * 3);
    }
  };
  auto reader = [&] {
    while (!stop.load()) {
      const LaunchRecord r = LastLaunch(KernelFamily::kSample);
      ++reads;
      if (r.grid_blocks == 0) continue;
      const int64_t v = r.grid_blocks;
      if (r.kernel != reinterpret_cast<const void*>(v * 16) ||
          r.threads != static_cast<int>(v % 1024) + 1 ||
          r.dynamic_smem != static_cast<size_t>(v) * 3) {
        ++torn;
      }
    }
  };
  std::thread r1(reader), r2(reader);
  std::thread w1(writer, 0), w2(writer, 1 << 30);
  w1.join();
  w2.join();
  stop = true;
  r1.join();
  r2.join();
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  const LaunchRecord last = LastLaunch(KernelFamily::kSample);
  EXPECT_TRUE(last.grid_blocks == kIters || last.grid_blocks == (1 << 30) + kIters);
}

}  // namespace
}  // namespace saturn::gpu
