// GemmPlanner (gemm_planner.h): the start-up measurement of the GEMM paths.
#include "kernels/cpu/gemm_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_features.h"

namespace saturn::cpu {
namespace {

constexpr int64_t kProbeRows = 512;  // weight rows timed: enough to occupy every thread
constexpr int kRuns = 3;             // fastest of these (after one warm-up) is kept

double TimeUs(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const Tensor& w,
              const Tensor& out, GemmPath path, int prefetch_blocks) {
  const auto t0 = std::chrono::steady_clock::now();
  (void)Gemm(pool, kernels, nullptr, x, w, out, path, prefetch_blocks);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double FastestUs(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const Tensor& w,
                 const Tensor& out, GemmPath path, int prefetch_blocks) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r <= kRuns; ++r) {
    const double us = TimeUs(pool, kernels, x, w, out, path, prefetch_blocks);
    if (r > 0) best = std::min(best, us);
  }
  return best;
}

// Bytes of synthetic weights the prefetch probe streams: twice the last-level cache (so
// they come from memory), within [16, 64] MiB.
size_t PrefetchProbeBytes() {
  return std::clamp<size_t>(2 * LastLevelCacheBytes(), size_t{16} << 20, size_t{64} << 20);
}

// Rows shorter than this many elements are mostly per-row overhead (reductions, k tails):
// their prefetch distance is not measured (it stays one block).
constexpr int64_t kMinPrefetchProbeK = 64;

// Timed rounds of the prefetch probe (after one warm-up); each times every candidate once.
constexpr int kPrefetchRounds = 16;

// The software prefetch distance for the skinny kernel at M = 1 on weights of w's (K, dtype)
// that do not fit in cache. Each round times every candidate back to back, starting from a
// different one each round, and scores each by its time over no prefetch's in the same round,
// so a burst of load elsewhere on the machine (which moves a whole round) cancels. A distance
// is taken only where it wins clearly: a median score under 0.97 and faster than no prefetch
// in three rounds of four (a sign test); otherwise none. On a shared 2-core Zen 5 VM single
// probes swung +-10 %: fastest-of-two had picked 2 blocks for bf16 weights where no prefetch
// streamed 7 % faster over 40 interleaved steps of the `small` model.
int MeasurePrefetchBlocks(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w) {
  const int64_t k = w.cols;
  const size_t elem = DTypeSize(w.dtype);
  const int64_t rows =
      std::max<int64_t>(256, static_cast<int64_t>(PrefetchProbeBytes() / (elem * k)));
  // Ones (f32 or bf16 bit patterns): the values do not matter, the bytes moved do.
  std::vector<uint32_t> ws((static_cast<size_t>(rows * k) * elem + 3) / 4,
                           elem == 4 ? 0x3f800000u : 0x3f803f80u);
  std::vector<float> xs(static_cast<size_t>(k), 1.0f), os(static_cast<size_t>(rows));
  const Tensor x{xs.data(), DType::kF32, 1, k}, wt{ws.data(), w.dtype, rows, k},
      out{os.data(), DType::kF32, 1, rows};
  constexpr int kCount = static_cast<int>(std::size(GemmPlanner::kPrefetchCandidates));
  static_assert(GemmPlanner::kPrefetchCandidates[0] == 0, "scores are relative to no prefetch");
  std::vector<double> scores[kCount];
  for (int round = 0; round <= kPrefetchRounds; ++round) {
    double us[kCount];
    for (int i = 0; i < kCount; ++i) {
      const int c = (round + i) % kCount;
      us[c] =
          TimeUs(pool, kernels, x, wt, out, GemmPath::kSkinny, GemmPlanner::kPrefetchCandidates[c]);
    }
    if (round == 0 || !(us[0] > 0)) continue;  // the warm-up
    for (int c = 1; c < kCount; ++c) scores[c].push_back(us[c] / us[0]);
  }
  int best = 0;
  double best_score = 0.97;
  for (int c = 1; c < kCount; ++c) {
    std::vector<double>& v = scores[c];
    if (v.empty()) continue;
    const auto wins = std::count_if(v.begin(), v.end(), [](double r) { return r < 1; });
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double median = v[v.size() / 2];
    if (median < best_score && 4 * wins >= 3 * static_cast<int64_t>(v.size())) {
      best = c;
      best_score = median;
    }
  }
  return GemmPlanner::kPrefetchCandidates[best];
}

// MeasurePrefetchBlocks once per process for each (kernel level, weight dtype, threads): the
// distance is a property of the machine's memory system, measured at the K of the first
// weight that asks (later K reuse its block count).
int PrefetchBlocksFor(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w) {
  if (w.cols < kMinPrefetchProbeK) return 1;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, int> measured;
  const std::tuple<int, int, int> key{static_cast<int>(kernels.isa), static_cast<int>(w.dtype),
                                      pool.num_threads()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = measured.find(key);
  if (it == measured.end())
    it = measured.emplace(key, MeasurePrefetchBlocks(pool, kernels, w)).first;
  return it->second;
}

}  // namespace

GemmPlanner::Plan GemmPlanner::Probe(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w) {
  const int64_t k = w.cols, rows = std::min<int64_t>(w.rows, kProbeRows);
  const Tensor wp{w.data, w.dtype, rows, k};
  std::vector<float> xs(static_cast<size_t>(kMaxProbeM * k)), os(kMaxProbeM * rows);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f;
  Plan plan;
  plan.prefetch_blocks = PrefetchBlocksFor(pool, kernels, w);
  const int pf = plan.prefetch_blocks;
  int skinny_losses = 0;
  for (int i = 0; i < kProbes; ++i) {
    const int64_t m = int64_t{1} << i;
    const Tensor x{xs.data(), DType::kF32, m, k}, out{os.data(), DType::kF32, m, rows};
    GemmPath best = GemmPath::kBlas;
    double best_us = FastestUs(pool, kernels, x, wp, out, GemmPath::kBlas, pf);
    const double blocked = FastestUs(pool, kernels, x, wp, out, GemmPath::kBlocked, pf);
    if (blocked < best_us) best = GemmPath::kBlocked, best_us = blocked;
    plan.beyond = best;
    if (skinny_losses < 2) {
      const double skinny = FastestUs(pool, kernels, x, wp, out, GemmPath::kSkinny, pf);
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

const GemmPlanner::Plan& GemmPlanner::PlanFor(ThreadPool& pool, const IsaKernels& kernels,
                                              const Tensor& w) {
  const std::pair<int64_t, int> key{w.cols, static_cast<int>(w.dtype)};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, Probe(pool, kernels, w)).first;
  return it->second;
}

GemmPath GemmPlanner::Choose(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w,
                             int64_t m) {
  std::lock_guard<std::mutex> lock(mu_);
  const Plan& plan = PlanFor(pool, kernels, w);
  if (m > kMaxProbeM) return plan.beyond;
  const int i =
      static_cast<int>(std::lround(std::log2(static_cast<double>(std::max<int64_t>(m, 1)))));
  return plan.at[std::min(i, kProbes - 1)];
}

int GemmPlanner::PrefetchBlocks(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w) {
  std::lock_guard<std::mutex> lock(mu_);
  return PlanFor(pool, kernels, w).prefetch_blocks;
}

std::string GemmPlanner::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  for (const auto& [key, plan] : plans_) {
    absl::StrAppend(&s, s.empty() ? "" : "; ", "k", key.first, "/",
                    DTypeName(static_cast<DType>(key.second)), ": prefetch=", plan.prefetch_blocks);
    for (int i = 0; i < kProbes; ++i) {
      absl::StrAppend(&s, " ", int64_t{1} << i, "=", GemmPathName(plan.at[i]));
    }
    absl::StrAppend(&s, " more=", GemmPathName(plan.beyond));
  }
  return s;
}

}  // namespace saturn::cpu
