// GemmPlanner: which GEMM path (gemm.cc: the skinny weight-streaming kernel, the blocked
// kernel, OpenBLAS, or AMX tiles for bf16 weights where the CPU has them and the OS grants
// them) runs m input rows against a weight matrix, decided by measuring them
// on the running machine rather than by constants tuned on one CPU. The first GEMM with a
// given (K, weight dtype) times the paths on that weight's first rows at M = 1, 2, 4, ... 256
// (fastest of a few runs each; the skinny kernel drops out once it has lost twice in a row)
// and keeps the fastest per probed M (the skinny kernel for every M below its largest win:
// its edge only shrinks with M, so a loss below a win is noise). An M between probes takes the
// choice of the nearest probe in log scale, an M past the last probe the fastest of the
// many-row paths (blocked, BLAS, AMX) there. Before that, where the skinny kernel may run, it
// takes its software prefetch distances (GemmArgs:: prefetch_blocks for its 8-row blocks,
// measured at M = 2; prefetch_bytes for its M = 1 row stream), each measured once per process for
// each kernel level, weight dtype and thread count on a 16 MiB synthetic weight matrix evicted from
// the caches before each run, so the rows come from memory as a decode step's do (and with the L2
// prefetch hint, gemm_skinny.inc's Stream): candidates interleaved over rotated rounds, each scored
// against no prefetch in the same round, a distance kept only where it wins clearly
// (gemm_planner.cc); the path probes then run with those distances. Later calls are a lookup.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "kernels/cpu/gemm/stream_tuner.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace saturn::cpu {

class GemmPlanner {
 public:
  // The path for m rows against w (probes on first use of w's (K, dtype); the probe's
  // output never leaves the planner). Never kAuto.
  GemmPath Choose(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w, int64_t m);
  // The skinny kernel's prefetch distances for w's (K, dtype), measured with the paths: in
  // blocks for its 8-row blocks (M > 1), in bytes for its M = 1 row stream.
  int PrefetchBlocks(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w);
  int64_t PrefetchBytes(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w);
  // The M = 1 row stream's distance for served GEMMs on w: the probe's, then the StreamTuner's
  // (stream_tuner.h) for weights of the tuned dtype of at least kMinTunedBytes (smaller ones
  // stay in cache, where the distance hardly matters). RecordStream reports how such a GEMM ran.
  int64_t StreamPrefetchBytes(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w);
  void RecordStream(const Tensor& w, int64_t prefetch_bytes, double seconds);
  // True while the tuner has started on served GEMMs and not settled yet.
  bool Tuning() const;
  // The weight dtype whose served M = 1 GEMMs tune the distance (the backend's weights; others,
  // such as calibration's f32 stream beside bf16 weights, keep the probe's). nullopt: none,
  // where the served weights never take the skinny path (bf16 in AMX tiles), so that
  // calibration's row-major GEMMs of that dtype do not start a tuner no served step would end.
  void set_tuned_dtype(std::optional<DType> dtype) { tuned_dtype_ = dtype; }
  static constexpr size_t kMinTunedBytes = size_t{1} << 20;
  // The measured choices so far, e.g. "k768/f32: prefetch=2 1=skinny ... more=blocked".
  std::string Describe() const;
  // Batch invariance: every M takes the skinny path, whose per-row sums do not depend on M
  // or on how rows are split across threads (one chain per output over k, in k's order; the
  // M = 1 stream too: GemmArgs::one_chain), so a request's logits are bit-identical
  // whatever else shares its steps. Only the prefetch distances are measured. bf16 weights
  // where AMX runs take the AMX kernels instead, the faster of the two per M: both sum each
  // output as one chain of TDPBF16PS tile products over k in k's order, zero-padded to whole
  // tiles, and a tile's element depends only on its own row of x and of w, so every M and
  // either kernel give the same bits (CpuBatchInvarianceTest.AmxKernelsGiveEachRowTheSameBits),
  // and at 3-4x the skinny kernel's rate from M = 4 up (the CPU backend uploads such weights
  // as AMX tiles, which gemm.cc runs without asking the planner). Off: the fastest path per M
  // (blocked, OpenBLAS, AMX and skinny each sum in their own order). Set before the first GEMM.
  void set_batch_invariant(bool on) { batch_invariant_ = on; }
  bool batch_invariant() const { return batch_invariant_; }

  static constexpr int kProbes = 9;  // M = 1, 2, 4, ..., 256
  static constexpr int64_t kMaxProbeM = int64_t{1} << (kProbes - 1);
  static constexpr int kPrefetchCandidates[] = {0, 1, 2, 4};  // blocks ahead
  static constexpr int64_t kPrefetchByteCandidates[] = {0, 2048, 4096, 8192, 16384};

 private:
  struct Plan {
    GemmPath at[kProbes];  // fastest path at M = 2^i
    GemmPath beyond;       // past the last probe
    int prefetch_blocks = 1;
    int64_t prefetch_bytes = 0;
    // False where only the AMX kernels run (batch-invariant bf16 on AMX): no distances then.
    bool skinny_runs = true;
  };
  Plan Probe(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w);
  const Plan& PlanFor(ThreadPool& pool, const IsaKernels& kernels, const Tensor& w);  // mu_ held
  bool Tuned(const Tensor& w) const {  // whether w's M = 1 streams go through tuner_
    return tuned_dtype_ == w.dtype && w.bytes() >= kMinTunedBytes;
  }

  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int>, Plan> plans_;  // (k, dtype) -> plan
  std::optional<DType> tuned_dtype_ = DType::kF32;
  bool batch_invariant_ = false;
  std::unique_ptr<StreamTuner> tuner_;  // for tuned_dtype_, from its first large M = 1 GEMM
};

}  // namespace saturn::cpu
