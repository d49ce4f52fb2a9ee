// StreamTuner (stream_tuner.h).
#include "kernels/cpu/gemm/stream_tuner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace saturn::cpu {

int ClearWinner(const std::vector<std::vector<double>>& scores, double max_score, double* median) {
  int best = 0;
  double best_median = max_score;
  for (size_t c = 1; c < scores.size(); ++c) {
    std::vector<double> v = scores[c];
    if (v.empty()) continue;
    const auto wins = std::count_if(v.begin(), v.end(), [](double r) { return r < 1; });
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double m = v[v.size() / 2];
    if (m < best_median && 4 * wins >= 3 * static_cast<int64_t>(v.size())) {
      best = static_cast<int>(c);
      best_median = m;
    }
  }
  if (median != nullptr) *median = best == 0 ? 1.0 : best_median;
  return best;
}

StreamTuner::StreamTuner(const std::vector<int64_t>& candidates, int64_t incumbent) {
  candidates_.push_back(incumbent);
  for (int64_t c : candidates) {
    if (c != incumbent) candidates_.push_back(c);
  }
  chosen_ = incumbent;
  scores_.resize(candidates_.size());
  if (candidates_.size() < 2) {
    settled_ = true;  // nothing to compare
    return;
  }
  StartRound();
}

void StreamTuner::StartRound() {
  const int n = static_cast<int>(candidates_.size());
  order_.resize(n);
  for (int i = 0; i < n; ++i) order_[i] = (i + round_) % n;
  slot_ = 0;
  round_spb_.assign(n, 0);
}

int64_t StreamTuner::Next(const void* weights) {
  if (settled_) return chosen_;
  if (pass_start_ == nullptr) pass_start_ = weights;
  if (weights == pass_start_ && trial_bytes_ > 0) {  // a pass is complete
    if (first_pass_bytes_ == 0) {
      first_pass_bytes_ = trial_bytes_;
      if (first_pass_bytes_ < kMinPassBytes) {
        settled_ = true;  // chosen_ is the incumbent
        return chosen_;
      }
    }
    if (burn_in_left_ > 0) {
      --burn_in_left_;
      trial_bytes_ = trial_seconds_ = 0;
    } else {
      EndTrial();
    }
  }
  return Current();
}

void StreamTuner::Record(int64_t used, double bytes, double seconds) {
  if (settled_ || used != Current() || !(bytes > 0) || !(seconds > 0)) return;
  trial_bytes_ += bytes;
  trial_seconds_ += seconds;
}

void StreamTuner::EndTrial() {
  round_spb_[order_[slot_]] = trial_seconds_ / trial_bytes_;
  trial_bytes_ = trial_seconds_ = 0;
  if (++slot_ < order_.size()) return;
  for (size_t c = 1; c < candidates_.size(); ++c) {
    scores_[c].push_back(round_spb_[c] / round_spb_[0]);
  }
  if (++round_ >= kRounds) {
    Settle();
    return;
  }
  StartRound();
}

void StreamTuner::Settle() {
  settled_ = true;
  chosen_ = candidates_[ClearWinner(scores_, kMaxScore, &chosen_score_)];
}

std::string StreamTuner::Describe() const {
  if (!settled_ && burn_in_left_ > 0) {
    return absl::StrCat(incumbent(), " (probe; tuning on served steps after ", burn_in_left_,
                        " more passes at it)");
  }
  if (!settled_) {
    return absl::StrCat(incumbent(), " (probe; tuning on served steps, round ", round_ + 1, " of ",
                        kRounds, ")");
  }
  if (candidates_.size() < 2) return absl::StrCat(chosen_);
  if (first_pass_bytes_ > 0 && first_pass_bytes_ < kMinPassBytes) {
    return absl::StrCat(chosen_, " (probe; a pass moves ",
                        absl::StrFormat("%.1f", first_pass_bytes_ / (1 << 20)),
                        " MiB, which stays in cache: not tuned)");
  }
  if (chosen_ == incumbent()) {
    return absl::StrCat(chosen_, " (probe; no other distance won on ", kRounds,
                        " rounds of served steps)");
  }
  return absl::StrCat(chosen_, " (tuned on served steps: ", absl::StrFormat("%.2fx", chosen_score_),
                      " the probe's ", incumbent(), "'s time over ", kRounds, " rounds)");
}

}  // namespace saturn::cpu
