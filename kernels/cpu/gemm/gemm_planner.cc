// GemmPlanner (gemm_planner.h): the start-up measurement of the GEMM paths.
#include "kernels/cpu/gemm/gemm_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/stream_memory.h"

namespace saturn::cpu {
namespace {

constexpr int64_t kProbeRows = 512;  // weight rows timed: enough to occupy every thread
constexpr int kRuns = 3;             // fastest of these (after one warm-up) is kept
// At M = 1 and 2 the paths differ most in how they stream the weights (a GEMV, the skinny
// kernel's row stream), so there they are timed on kStreamProbeBytes of weights evicted from
// the caches before each run, which come from memory as a decode step's do. On the 512 rows
// alone (L2-resident) OpenBLAS's GEMV won M = 1 and 2, though from memory it streams at half
// the skinny kernel's rate (docs/CPU.md). Streaming every bandwidth-bound M (up to 16) instead
// made each engine start far slower (the sanitizer test pass most), so larger M keep the
// in-cache probe.
constexpr int64_t kStreamProbeMaxM = 2;
constexpr size_t kStreamProbeBytes = size_t{8} << 20;

// Synthetic weights for the probes that stream from memory: `rows` x k ones (f32 or bf16 bit
// patterns, as `dtype`); the values do not matter, the bytes moved do. In the same kind of
// memory as the backend's weights (huge pages where the kernel grants them), whose page walks
// the stream pays too.
std::unique_ptr<uint32_t[], FreeDeleter> OnesWeights(int64_t rows, int64_t k, DType dtype) {
  const size_t words = (static_cast<size_t>(rows * k) * DTypeSize(dtype) + 3) / 4;
  auto w = StreamedArray<uint32_t>(words);
  if (w == nullptr) throw std::bad_alloc();
  std::fill_n(w.get(), words, DTypeSize(dtype) == 4 ? 0x3f800000u : 0x3f803f80u);
  return w;
}

// One GEMM's time; with `cold`, w's bytes are evicted from the caches first (untimed), so it
// streams them from memory as a decode step does, whatever the last-level cache holds.
double TimeUs(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x, const Tensor& w,
              const Tensor& out, GemmPath path, int prefetch_blocks, int64_t prefetch_bytes,
              bool cold) {
  if (cold) EvictFromCache(w.data, w.bytes());
  const auto t0 = std::chrono::steady_clock::now();
  (void)Gemm(pool, kernels, nullptr, x, w, out, path, prefetch_blocks, prefetch_bytes);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// The fastest of kRuns timed rounds (after one warm-up round) of each path. Every round times
// each path once, starting from a different one each round: what one path leaves behind
// (OpenBLAS's threads spin on the cores for a while after its calls, a pool worker may have
// gone to sleep) then slows a different path in each round, and the fastest round of each
// path is one it did not follow the disturber in. Timing each path's runs back to back
// instead let one such spell decide a probe: the skinny kernel, faster than OpenBLAS at M = 1,
// lost M = 1 and 2 to it in half the starts and dropped out (docs/CPU.md).
std::vector<double> FastestUs(ThreadPool& pool, const IsaKernels& kernels, const Tensor& x,
                              const Tensor& w, const Tensor& out,
                              const std::vector<GemmPath>& paths, int prefetch_blocks,
                              int64_t prefetch_bytes, bool cold) {
  const size_t n = paths.size();
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  for (int r = 0; r <= kRuns; ++r) {
    for (size_t j = 0; j < n; ++j) {
      const size_t c = (j + static_cast<size_t>(r)) % n;
      const double us =
          TimeUs(pool, kernels, x, w, out, paths[c], prefetch_blocks, prefetch_bytes, cold);
      if (r > 0) best[c] = std::min(best[c], us);
    }
  }
  return best;
}

// Bytes of synthetic weights the prefetch probe streams, evicted from the caches before each
// run (so they come from memory however large the last-level cache is). Sizing the probe at
// twice the last-level cache instead (at most 64 MiB) left it cache-resident where the L3 is
// large (a VM's L3 may report hundreds of MiB), and the probe then picked distances at random
// (docs/CPU.md).
constexpr size_t kPrefetchProbeBytes = size_t{16} << 20;

// Rows shorter than this many elements are mostly per-row overhead (reductions, k tails):
// their prefetch distance is not measured (it stays one block).
constexpr int64_t kMinPrefetchProbeK = 64;

// Timed rounds of a prefetch probe (after one warm-up); each times every candidate once.
constexpr int kPrefetchRounds = 12;

// Which distance a probe measures: the 8-row blocks' (in blocks, at M = 2, where they run) or
// the M = 1 row stream's (in bytes).
enum class PrefetchKind { kBlocks, kBytes };

// The skinny kernel's software prefetch distance on weights of w's (K, dtype) that do not fit
// in cache. Each round times every candidate back to back, starting from a different one each
// round, and scores each by its time over no prefetch's in the same round, so a burst of load
// elsewhere on the machine (which moves a whole round) cancels. A distance is taken only
// where it wins clearly: a median score under 0.97 and faster than no prefetch in three
// rounds of four (a sign test); otherwise none. On a shared machine single probes swing by
// more than the distances differ: fastest-of-two picked a distance that then streamed slower
// than none over served steps (docs/CPU.md).
int64_t MeasurePrefetch(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w,
                        PrefetchKind kind) {
  const int64_t k = w.cols, m = kind == PrefetchKind::kBytes ? 1 : 2;
  const size_t elem = DTypeSize(w.dtype);
  const int64_t rows =
      std::max<int64_t>(256, static_cast<int64_t>(kPrefetchProbeBytes / (elem * k)));
  const auto ws = OnesWeights(rows, k, w.dtype);
  std::vector<float> xs(static_cast<size_t>(m * k), 1.0f), os(static_cast<size_t>(m * rows));
  const Tensor x{xs.data(), DType::kF32, m, k}, wt{ws.get(), w.dtype, rows, k},
      out{os.data(), DType::kF32, m, rows};
  std::vector<int64_t> candidates;
  if (kind == PrefetchKind::kBytes) {
    candidates.assign(std::begin(GemmPlanner::kPrefetchByteCandidates),
                      std::end(GemmPlanner::kPrefetchByteCandidates));
  } else {
    candidates.assign(std::begin(GemmPlanner::kPrefetchCandidates),
                      std::end(GemmPlanner::kPrefetchCandidates));
  }
  const int count = static_cast<int>(candidates.size());  // candidates[0] is 0: no prefetch
  auto time = [&](int64_t d) {
    return kind == PrefetchKind::kBytes
               ? TimeUs(pool, kernels, x, wt, out, GemmPath::kSkinny, 0, d, true)
               : TimeUs(pool, kernels, x, wt, out, GemmPath::kSkinny, static_cast<int>(d), 0, true);
  };
  std::vector<std::vector<double>> scores(candidates.size());
  for (int round = 0; round <= kPrefetchRounds; ++round) {
    std::vector<double> us(candidates.size());
    for (int i = 0; i < count; ++i) {
      const int c = (round + i) % count;
      us[c] = time(candidates[c]);
    }
    if (round == 0 || !(us[0] > 0)) continue;  // the warm-up
    for (int c = 1; c < count; ++c) scores[c].push_back(us[c] / us[0]);
  }
  return candidates[ClearWinner(scores, StreamTuner::kMaxScore)];
}

// MeasurePrefetch once per process for each (kind, kernel level, weight dtype, threads): the
// distance is a property of the machine's memory system, measured at the K of the first
// weight that asks (later K reuse it).
int64_t PrefetchFor(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w,
                    PrefetchKind kind) {
  if (w.cols < kMinPrefetchProbeK) return kind == PrefetchKind::kBytes ? 0 : 1;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int>, int64_t> measured;
  const std::tuple<int, int, int, int> key{static_cast<int>(kind), static_cast<int>(kernels.isa),
                                           static_cast<int>(w.dtype), pool.num_threads()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = measured.find(key);
  if (it == measured.end())
    it = measured.emplace(key, MeasurePrefetch(pool, kernels, w, kind)).first;
  return it->second;
}

}  // namespace

GemmPlanner::Plan GemmPlanner::Probe(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w) {
  const int64_t k = w.cols, rows = std::min<int64_t>(w.rows, kProbeRows);
  const Tensor wp{w.data, w.dtype, rows, k};
  std::vector<float> xs(static_cast<size_t>(kMaxProbeM * k)), os(kMaxProbeM * rows);
  const int64_t stream_rows =
      std::max<int64_t>(rows, static_cast<int64_t>(kStreamProbeBytes / (DTypeSize(w.dtype) * k)));
  const auto stream_ws = OnesWeights(stream_rows, k, w.dtype);
  std::vector<float> stream_os(static_cast<size_t>(kStreamProbeMaxM * stream_rows));
  const Tensor ws{stream_ws.get(), w.dtype, stream_rows, k};
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f;
  Plan plan;
  const bool amx = AmxRuns(kernels.isa, w.dtype);  // a candidate only where it can run
  plan.skinny_runs = !(batch_invariant_ && amx);   // else only the AMX kernels run
  if (plan.skinny_runs) {  // the skinny kernel's distances, where it may run
    plan.prefetch_blocks = static_cast<int>(PrefetchFor(pool, kernels, w, PrefetchKind::kBlocks));
    plan.prefetch_bytes = PrefetchFor(pool, kernels, w, PrefetchKind::kBytes);
  }
  if (batch_invariant_ && !amx) {  // one path for every M: nothing to choose
    std::fill(std::begin(plan.at), std::end(plan.at), GemmPath::kSkinny);
    plan.beyond = GemmPath::kSkinny;
    return plan;
  }
  const int pf = plan.prefetch_blocks;
  const int64_t pf_bytes = plan.prefetch_bytes;
  int skinny_losses = 0;
  for (int i = 0; i < kProbes; ++i) {
    const int64_t m = int64_t{1} << i;
    const bool streamed = m <= kStreamProbeMaxM;
    const Tensor x{xs.data(), DType::kF32, m, k};
    const Tensor out = streamed ? Tensor{stream_os.data(), DType::kF32, m, stream_rows}
                                : Tensor{os.data(), DType::kF32, m, rows};
    // The many-row paths first (the first of equals wins), then the few-row ones. Batch
    // invariant with AMX: only the two AMX kernels, which sum each output alike
    // (gemm_planner.h: set_batch_invariant).
    std::vector<GemmPath> paths;
    if (!batch_invariant_) paths = {GemmPath::kBlas, GemmPath::kBlocked};
    if (amx) paths.push_back(GemmPath::kAmx);
    const size_t many_row_paths = paths.size();
    if (amx) paths.push_back(GemmPath::kAmxStream);
    if (skinny_losses < 2 && !batch_invariant_) paths.push_back(GemmPath::kSkinny);
    const std::vector<double> us =
        FastestUs(pool, kernels, x, streamed ? ws : wp, out, paths, pf, pf_bytes, streamed);
    size_t best = 0;
    for (size_t c = 0; c < paths.size(); ++c) {
      if (us[c] < us[best]) best = c;
      // Past the last probe only the many-row paths: the AMX stream kernel re-reads all of x
      // for each 32-row weight panel, which leaves the L2 as M grows (docs/CPU.md).
      if (c + 1 == many_row_paths) plan.beyond = paths[best];
    }
    if (skinny_losses < 2) {
      skinny_losses = paths[best] == GemmPath::kSkinny ? 0 : skinny_losses + 1;
    }
    plan.at[i] = paths[best];
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

int64_t GemmPlanner::PrefetchBytes(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w) {
  std::lock_guard<std::mutex> lock(mu_);
  return PlanFor(pool, kernels, w).prefetch_bytes;
}

int64_t GemmPlanner::StreamPrefetchBytes(ThreadPool& pool, const IsaKernels& kernels,
                                         const Tensor& w) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t probed = PlanFor(pool, kernels, w).prefetch_bytes;
  if (!Tuned(w)) return probed;
  if (tuner_ == nullptr) {
    tuner_ = std::make_unique<StreamTuner>(std::vector<int64_t>(std::begin(kPrefetchByteCandidates),
                                                                std::end(kPrefetchByteCandidates)),
                                           probed);
  }
  return tuner_->Next(w.data);
}

void GemmPlanner::RecordStream(const Tensor& w, int64_t prefetch_bytes, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tuner_ == nullptr || !Tuned(w)) return;
  tuner_->Record(prefetch_bytes, static_cast<double>(w.bytes()), seconds);
}

bool GemmPlanner::Tuning() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tuner_ != nullptr && !tuner_->settled();
}

std::string GemmPlanner::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  for (const auto& [key, plan] : plans_) {
    const bool tuned = tuner_ != nullptr && tuned_dtype_.has_value() &&
                       key.second == static_cast<int>(*tuned_dtype_);
    absl::StrAppend(&s, s.empty() ? "" : "; ", "k", key.first, "/",
                    DTypeName(static_cast<DType>(key.second)), ":");
    if (plan.skinny_runs) {
      absl::StrAppend(&s, " prefetch=", plan.prefetch_blocks, " prefetch_bytes=",
                      tuned ? tuner_->Describe() : absl::StrCat(plan.prefetch_bytes));
    }
    if (batch_invariant_ && plan.skinny_runs) {
      absl::StrAppend(&s, " every M=skinny (batch invariant)");
      continue;
    }
    for (int i = 0; i < kProbes; ++i) {
      absl::StrAppend(&s, " ", int64_t{1} << i, "=", GemmPathName(plan.at[i]));
    }
    absl::StrAppend(&s, " more=", GemmPathName(plan.beyond));
    if (batch_invariant_) absl::StrAppend(&s, " (batch invariant: AMX tiles' chains)");
  }
  return s;
}

}  // namespace saturn::cpu
