// GemmPlanner (gemm_planner.h): the start-up measurement of the GEMM paths.
#include "kernels/cpu/gemm_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace saturn::cpu {
namespace {

constexpr int64_t kProbeRows = 512;  // weight rows timed: enough to occupy every thread
constexpr int kRuns = 3;             // fastest of these (after one warm-up) is kept

double FastestUs(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const Tensor& w,
                 const Tensor& out, GemmPath path) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r <= kRuns; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)Gemm(pool, kernels, nullptr, x, w, out, path);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, us);
  }
  return best;
}

}  // namespace

GemmPlanner::Plan GemmPlanner::Probe(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w) {
  const int64_t k = w.cols, rows = std::min<int64_t>(w.rows, kProbeRows);
  const Tensor wp{w.data, w.dtype, rows, k};
  std::vector<float> xs(static_cast<size_t>(kMaxProbeM * k)), os(kMaxProbeM * rows);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f;
  Plan plan;
  int skinny_losses = 0;
  for (int i = 0; i < kProbes; ++i) {
    const int64_t m = int64_t{1} << i;
    const Tensor x{xs.data(), DType::kF32, m, k}, out{os.data(), DType::kF32, m, rows};
    GemmPath best = GemmPath::kBlas;
    double best_us = FastestUs(pool, kernels, x, wp, out, GemmPath::kBlas);
    const double blocked = FastestUs(pool, kernels, x, wp, out, GemmPath::kBlocked);
    if (blocked < best_us) best = GemmPath::kBlocked, best_us = blocked;
    plan.beyond = best;
    if (skinny_losses < 2) {
      const double skinny = FastestUs(pool, kernels, x, wp, out, GemmPath::kSkinny);
      if (skinny < best_us) best = GemmPath::kSkinny;
      skinny_losses = best == GemmPath::kSkinny ? 0 : skinny_losses + 1;
    }
    plan.at[i] = best;
  }
  // The skinny kernel's edge (one pass over the weights, no packing) only shrinks as M
  // grows, so a probe it lost below one it won was noise: it runs up to its largest win.
  for (int i = kProbes - 1; i > 0; --i) {
    if (plan.at[i] != GemmPath::kSkinny) continue;
    for (int j = 0; j < i; ++j) plan.at[j] = GemmPath::kSkinny;
    break;
  }
  return plan;
}

GemmPath GemmPlanner::Choose(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w,
                             int64_t m) {
  const std::pair<int64_t, int> key{w.cols, static_cast<int>(w.dtype)};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, Probe(pool, kernels, w)).first;
  if (m > kMaxProbeM) return it->second.beyond;
  const int i =
      static_cast<int>(std::lround(std::log2(static_cast<double>(std::max<int64_t>(m, 1)))));
  return it->second.at[std::min(i, kProbes - 1)];
}

std::string GemmPlanner::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  for (const auto& [key, plan] : plans_) {
    absl::StrAppend(&s, s.empty() ? "" : "; ", "k", key.first, "/",
                    DTypeName(static_cast<DType>(key.second)), ":");
    for (int i = 0; i < kProbes; ++i) {
      absl::StrAppend(&s, " ", int64_t{1} << i, "=", GemmPathName(plan.at[i]));
    }
    absl::StrAppend(&s, " more=", GemmPathName(plan.beyond));
  }
  return s;
}

}  // namespace saturn::cpu
