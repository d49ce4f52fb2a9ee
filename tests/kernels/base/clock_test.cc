// kernels/base/clock.h: NowUs is monotonic and NowSeconds its value in seconds; UnixNowSeconds
// reads the wall clock (seconds since 1970), the value calibrations and probes carry.
#include "kernels/base/clock.h"

#include <gtest/gtest.h>

#include <chrono>

namespace saturn {
namespace {

TEST(ClockTest, SteadyClockNeverGoesBack) {
  const double a = NowUs(), b = NowUs();
  EXPECT_LE(a, b);
  EXPECT_NEAR(NowSeconds(), NowUs() * 1e-6, 1.0);
}

TEST(ClockTest, UnixNowSecondsIsTheWallClock) {
  const double system_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double s = UnixNowSeconds();
  EXPECT_NEAR(s, system_s, 5.0);
  EXPECT_GT(s, 1.7e9);  // after 2023-11
}

}  // namespace
}  // namespace saturn
