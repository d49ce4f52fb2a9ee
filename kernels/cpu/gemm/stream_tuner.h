// StreamTuner: the M = 1 weight stream's software prefetch distance, settled on the engine's
// own batch-1 decode steps (a whole step per trial, candidates in rotated rounds, a sign test
// against the start-up probe's distance), since where the weights come from decides the best
// distance and a probe cannot reproduce that. The measurements behind it: docs/CPU.md. Not
// thread-safe (GemmPlanner holds its lock).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saturn::cpu {

// The rule the planner's prefetch probe and StreamTuner both decide by. scores[c] holds
// candidate c's paired ratios (its time over the incumbent's, one per round; scores[0], the
// incumbent's, is ignored). The winner is the candidate with the lowest median ratio under
// max_score that also won (ratio < 1) in at least three rounds of four: a sign test, so one
// lucky round cannot carry it. Returns 0 (the incumbent) when none qualifies, else the winner's
// index; *median, where given, gets the winner's median ratio (1 for the incumbent).
int ClearWinner(const std::vector<std::vector<double>>& scores, double max_score,
                double* median = nullptr);

class StreamTuner {
 public:
  // Passes at the incumbent before the first round: the distances' scores drift over a
  // model's first passes after loading (docs/CPU.md), and serving lives in the later regime.
  static constexpr int kBurnInPasses = 16;
  // A first pass that moved less than this stays in the caches from step to step (the tiny
  // test model's one 4 MiB matrix): the tuner settles on the incumbent at once.
  static constexpr double kMinPassBytes = 32.0 * (1 << 20);
  static constexpr int kRounds = 8;
  static constexpr double kMaxScore = 0.97;  // also the planner's probe's (ClearWinner)

  // candidates: the distances to try (bytes; the incumbent among them or not).
  StreamTuner(const std::vector<int64_t>& candidates, int64_t incumbent);

  // The distance for the next M = 1 GEMM, on `weights` (which mark where a pass starts).
  int64_t Next(const void* weights);
  // That GEMM ran with `used` and moved `bytes` of weights in `seconds`.
  void Record(int64_t used, double bytes, double seconds);

  bool settled() const { return settled_; }
  int64_t incumbent() const { return candidates_[0]; }
  // e.g. "8192 (tuned on served steps: 0.81x the probe's 2048's time over 8 rounds)" or
  // "2048 (probe; tuning on served steps, round 3 of 8)".
  std::string Describe() const;

 private:
  int64_t Current() const { return settled_ ? chosen_ : candidates_[order_[slot_]]; }
  void StartRound();
  void EndTrial();
  void Settle();

  std::vector<int64_t> candidates_;  // [0] is the incumbent
  std::vector<int> order_;           // this round's order of candidate indices
  size_t slot_ = 0;                  // position in order_
  int round_ = 0;
  const void* pass_start_ = nullptr;  // the weights a pass starts on
  int burn_in_left_ = kBurnInPasses;
  double first_pass_bytes_ = 0;  // 0 until the first pass is complete
  double trial_bytes_ = 0, trial_seconds_ = 0;
  std::vector<double> round_spb_;            // this round's seconds per byte, by candidate
  std::vector<std::vector<double>> scores_;  // per candidate: spb / incumbent's spb, by round
  bool settled_ = false;
  int64_t chosen_ = 0;
  double chosen_score_ = 1;
};

}  // namespace saturn::cpu
