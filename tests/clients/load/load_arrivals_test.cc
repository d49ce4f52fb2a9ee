// The open loop's Poisson schedule: mean gap 1/rate and coefficient of variation 1 over
// many seeded draws (bounds of about five standard errors), determinism per seed, and
// rate = inf sending everything at once.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "clients/load/arrivals.h"

namespace saturn::clients {
namespace {

TEST(PoissonScheduleTest, MeanGapIsOneOverRateAndSpreadIsExponential) {
  for (double rate : {0.5, 4.0, 250.0}) {
    std::vector<double> gaps;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      PoissonSchedule s(rate, seed);
      double prev = 0;
      for (int i = 0; i < 2000; ++i) {
        const double t = s.Next();
        ASSERT_GE(t, prev);
        gaps.push_back(t - prev);
        prev = t;
      }
    }
    const double n = static_cast<double>(gaps.size());
    double mean = 0, var = 0;
    for (double g : gaps) mean += g / n;
    for (double g : gaps) var += (g - mean) * (g - mean) / (n - 1);
    const double cv = std::sqrt(var) / mean;
    // Standard error of the mean of exponentials: (1/rate)/sqrt(n); of the CV, about 1/sqrt(n).
    EXPECT_NEAR(mean * rate, 1.0, 5 / std::sqrt(n)) << "rate " << rate;
    EXPECT_NEAR(cv, 1.0, 5 / std::sqrt(n)) << "rate " << rate;
  }
}

TEST(PoissonScheduleTest, CountInAWindowIsPoisson) {
  // Arrivals in [0, 1) at rate 10: mean 10 and variance 10 over many seeds.
  const int trials = 4000;
  double mean = 0, sq = 0;
  for (int seed = 0; seed < trials; ++seed) {
    PoissonSchedule s(10, seed);
    int n = 0;
    while (s.Next() < 1.0) ++n;
    mean += n;
    sq += static_cast<double>(n) * n;
  }
  mean /= trials;
  const double var = sq / trials - mean * mean;
  EXPECT_NEAR(mean, 10, 5 * std::sqrt(10.0 / trials));
  EXPECT_NEAR(var / mean, 1.0, 0.15);
}

TEST(PoissonScheduleTest, SameSeedSameScheduleOtherSeedOther) {
  PoissonSchedule a(3, 42), b(3, 42), c(3, 43);
  bool differs = false;
  for (int i = 0; i < 50; ++i) {
    const double x = a.Next();
    EXPECT_DOUBLE_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(PoissonScheduleTest, InfiniteRateSendsAllAtOnce) {
  PoissonSchedule s(INFINITY, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.Next(), 0);
}

TEST(ParseRateTest, AcceptsPositiveAndInfRejectsTheRestNamingTheFlag) {
  EXPECT_DOUBLE_EQ(*ParseRate("--request_rate", "2.5"), 2.5);
  EXPECT_TRUE(std::isinf(*ParseRate("--request_rate", "inf")));
  EXPECT_TRUE(std::isinf(*ParseRate("--request_rate", "INF")));
  for (const char* bad : {"0", "-1", "abc", "", "nan"}) {
    absl::StatusOr<double> r = ParseRate("--request_rate", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--request_rate"), std::string::npos);
  }
}

}  // namespace
}  // namespace saturn::clients
