// UtilizationSampler: the mean of the readings inside a window (not the last one), its bound,
// and no thread where the device has no such figure.
#include "server/diag/utilization_sampler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kernels/base/clock.h"

namespace saturn {
namespace {

TEST(UtilizationSamplerTest, AveragesTheReadingsInsideTheWindow) {
  UtilizationSampler s([] { return -1.0; }, absl::Milliseconds(200), 100);
  EXPECT_EQ(s.MeanPercent(0, 1e9), -1);
  // A load from t = 1 s to 3 s at 80 %, idle after: a report over the load reads 80 %,
  // whatever the device does at the moment it is asked.
  for (int i = 0; i <= 40; ++i) s.Add(i * 1e5, i <= 10 ? 0.0 : (i <= 30 ? 0.8 : 0.01));
  EXPECT_NEAR(s.MeanPercent(1.1e6, 3.0e6), 80, 1e-9);
  EXPECT_NEAR(s.MeanPercent(3.1e6, 4.0e6), 1, 1e-9);
  EXPECT_NEAR(s.MeanPercent(0, 1e6), 0, 1e-9);
  EXPECT_EQ(s.MeanPercent(5e6, 6e6), -1);  // no reading in it
}

TEST(UtilizationSamplerTest, KeepsAtMostItsCapacity) {
  UtilizationSampler s([] { return -1.0; }, absl::Milliseconds(200), 3);
  for (int i = 0; i < 10; ++i) s.Add(i, i < 7 ? 1.0 : 0.5);
  EXPECT_NEAR(s.MeanPercent(0, 100), 50, 1e-9);  // only the last three are left
}

TEST(UtilizationSamplerTest, NoThreadWithoutAFigure) {
  UtilizationSampler none([] { return -1.0; }, absl::Milliseconds(1), 100);
  EXPECT_FALSE(none.Start());
  std::atomic<int> reads{0};
  UtilizationSampler some(
      [&] {
        ++reads;
        return 0.5;
      },
      absl::Milliseconds(1), 1000);
  const double t0 = NowUs();
  ASSERT_TRUE(some.Start());
  while (reads.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  some.Stop();
  const int after_stop = reads.load();
  EXPECT_NEAR(some.MeanPercent(t0, NowUs()), 50, 1e-9);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(reads.load(), after_stop);  // stopped means stopped
}

}  // namespace
}  // namespace saturn
