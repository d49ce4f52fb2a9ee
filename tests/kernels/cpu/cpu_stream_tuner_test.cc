// kernels/cpu/gemm/stream_tuner.h: after a burn-in at the probe's distance, trials are whole passes
// over the served weights, one candidate each, in rotated rounds; the tuner settles on a
// candidate only where it clearly beats the probe's, and never moves after.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "kernels/cpu/gemm/stream_tuner.h"

namespace saturn::cpu {
namespace {

const std::vector<int64_t> kCandidates = {0, 2048, 4096, 8192};
const char kWeights[3] = {};  // three GEMMs' weights: only their addresses matter
constexpr int kBurnIn = StreamTuner::kBurnInPasses;
constexpr int kTuning = kBurnIn + 4 * StreamTuner::kRounds;  // passes until settled

// Serves `passes` passes of three GEMMs (weights a, b, c of 16 MiB each); a GEMM run with
// distance d takes spb(d, pass) seconds per byte. Returns the distances each pass ran with.
template <typename Spb>
std::vector<int64_t> Serve(StreamTuner& t, int passes, Spb spb) {
  std::vector<int64_t> used;
  for (int p = 0; p < passes; ++p) {
    int64_t first = -1;
    for (const char& w : kWeights) {
      const int64_t d = t.Next(&w);
      if (first < 0) first = d;
      EXPECT_EQ(d, first) << "the distance changed within pass " << p;
      const double bytes = 16.0 * (1 << 20);
      t.Record(d, bytes, bytes * spb(d, p));
    }
    used.push_back(first);
  }
  return used;
}

TEST(StreamTunerTest, EveryCandidateOncePerRoundThenTheClearWinner) {
  StreamTuner t(kCandidates, 2048);
  EXPECT_EQ(t.incumbent(), 2048);
  const int n = static_cast<int>(kCandidates.size());
  const std::vector<int64_t> used = Serve(t, kTuning + 3, [](int64_t d, int pass) {
    // 8 KiB streams 1.25x as fast, but only once the burn-in is over.
    return d == 8192 && pass >= kBurnIn ? 0.8e-10 : (d == 8192 ? 2e-10 : 1e-10);
  });
  for (int p = 0; p < kBurnIn; ++p) EXPECT_EQ(used[p], 2048) << "burn-in pass " << p;
  for (int r = 0; r < StreamTuner::kRounds; ++r) {
    std::map<int64_t, int> seen;
    for (int i = 0; i < n; ++i) ++seen[used[kBurnIn + r * n + i]];
    EXPECT_EQ(seen.size(), kCandidates.size()) << "round " << r;
  }
  EXPECT_NE(used[kBurnIn + n], used[kBurnIn]);  // each round starts from a different candidate
  EXPECT_TRUE(t.settled());
  for (size_t p = kTuning + 1; p < used.size(); ++p) EXPECT_EQ(used[p], 8192);
  EXPECT_NE(t.Describe().find("8192 (tuned on served steps: 0.80x the probe's 2048"),
            std::string::npos)
      << t.Describe();
}

TEST(StreamTunerTest, KeepsTheProbesDistanceWithoutAClearWin) {
  // 2 % faster is inside the noise it allows for.
  StreamTuner slight(kCandidates, 2048);
  Serve(slight, kTuning + 5, [](int64_t d, int) { return d == 4096 ? 0.98e-10 : 1e-10; });
  EXPECT_TRUE(slight.settled());
  EXPECT_EQ(slight.Next(nullptr), 2048);
  // Faster in the median but in only half the rounds: not a win either.
  StreamTuner flaky(kCandidates, 2048);
  Serve(flaky, kTuning + 5, [](int64_t d, int pass) {
    const bool even_round = ((pass - kBurnIn) / 4) % 2 == 0;
    return d == 8192 && even_round ? 0.5e-10 : (d == 8192 ? 1.1e-10 : 1e-10);
  });
  EXPECT_EQ(flaky.Next(nullptr), 2048);
  EXPECT_NE(flaky.Describe().find("probe; no other distance won"), std::string::npos)
      << flaky.Describe();
}

TEST(StreamTunerTest, IgnoresRunsWithAnotherDistanceAndSettledNeverMoves) {
  StreamTuner t(kCandidates, 0);
  const char& w = kWeights[0];
  const int64_t d = t.Next(&w);
  EXPECT_NE(t.Describe().find("tuning on served steps after"), std::string::npos) << t.Describe();
  t.Record(d + 1, 1e6, 1.0);                        // not the distance handed out: dropped
  t.Record(d, 0, 1.0);                              // nothing moved: dropped
  EXPECT_EQ(t.Next(&w), d);                         // nothing recorded: the pass has not ended
  Serve(t, 1, [](int64_t, int) { return 1e-10; });  // (the rest of that first pass)
  // Every distance but 0 streams at half the time: the tuner leaves 0.
  Serve(t, kTuning, [](int64_t dist, int) { return dist == 0 ? 2e-10 : 1e-10; });
  ASSERT_TRUE(t.settled());
  const int64_t chosen = t.Next(&w);
  EXPECT_NE(chosen, 0);
  Serve(t, 10, [](int64_t dist, int) { return dist == 0 ? 0.1e-10 : 1e-10; });
  EXPECT_EQ(t.Next(&w), chosen);
}

TEST(StreamTunerTest, APassThatStaysInCacheIsNotTuned) {
  StreamTuner t(kCandidates, 2048);
  for (int p = 0; p < 2; ++p) {
    const int64_t d = t.Next(&kWeights[0]);
    EXPECT_EQ(d, 2048);
    t.Record(d, 4.0 * (1 << 20), 1e-4);  // 4 MiB a pass
  }
  EXPECT_TRUE(t.settled());
  EXPECT_NE(t.Describe().find("a pass moves 4.0 MiB, which stays in cache: not tuned"),
            std::string::npos)
      << t.Describe();
}

TEST(StreamTunerTest, ACandidateListOfOneIsSettledAtOnce) {
  StreamTuner t({2048}, 2048);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.Next(nullptr), 2048);
}

}  // namespace
}  // namespace saturn::cpu
