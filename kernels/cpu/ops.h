// Internal to the CPU backend: one entry point per op family (each in its own .cc), plus the
// small vectorisable loops they share. Shapes were already checked by Backend (backend.cc);
// these check only dtypes and device-data indices, returning a Status, never aborting.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace saturn::cpu {

absl::Status Embedding(ThreadPool& pool, const Tensor& ids, const Tensor& table, const Tensor& out);
// kAuto asks `planner` (the path measured fastest at this M, gemm_planner.h); the others
// force a path (bench/gemm_bench.cc compares them) and need no planner. w is f32 or bf16.
// kAmx and kAmxStream (bf16 weights where DetectCpuFeatures().amx_usable, at the AVX-512
// level; elsewhere they fail with FAILED_PRECONDITION) multiply in AMX tiles (gemm_amx.cc):
// kAmx packs the weights into tiles as it goes, kAmxStream reads them as tiles straight from
// memory and packs x instead.
enum class GemmPath { kAuto, kSkinny, kBlocked, kBlas, kAmx, kAmxStream, kCount };
inline bool IsAmx(GemmPath p) { return p == GemmPath::kAmx || p == GemmPath::kAmxStream; }
// Whether GemmPath::kAmx runs for weights of dtype w at kernel level `isa`.
bool AmxRuns(Isa isa, DType w);
const char* GemmPathName(GemmPath path);
class GemmPlanner;
// prefetch_blocks, prefetch_bytes: the skinny kernel's software prefetch distances (GemmArgs:
// in blocks for M > 1, in bytes for M = 1); -1 takes the planner's measured distance (without
// a planner: one block, kDefaultPrefetchBytes).
constexpr int64_t kDefaultPrefetchBytes = 8192;
absl::Status Gemm(ThreadPool& pool, const IsaKernels& kernels, GemmPlanner* planner,
                  const Tensor& x, const Tensor& w, const Tensor& out,
                  GemmPath path = GemmPath::kAuto, int prefetch_blocks = -1,
                  int64_t prefetch_bytes = -1);
// One GEMM of x against w whose output columns go to `outs` in order (their columns sum to
// w's rows): one dispatch over all of w's rows, each chunk writing to its part's output.
absl::Status GemmSplit(ThreadPool& pool, const IsaKernels& kernels, GemmPlanner* planner,
                       const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs,
                       GemmPath path = GemmPath::kAuto);
absl::Status RmsNorm(ThreadPool& pool, const Tensor& x, const Tensor& weight, float eps,
                     const Tensor& out);
absl::Status AddRmsNorm(ThreadPool& pool, const Tensor& x, const Tensor& residual,
                        const Tensor& weight, float eps, const Tensor& out);
absl::Status Rope(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& positions,
                  int head_dim, const RopeParams& rope);
absl::Status KvWrite(ThreadPool& pool, const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                     const Tensor& k_cache, const Tensor& v_cache);
// batch_invariant: a pair's result does not depend on the batch, on how its prompt was chunked
// or on whether it was preempted: prompt rows (before batch.decode_from) take the lanes-over-rows
// kernel (AttnTile::lanes_over_rows) in tiles of any size, and each generated position's row,
// decoded or recomputed in a prompt chunk after a preemption, the decode step's tile of its own
// GQA group.
absl::Status Attention(ThreadPool& pool, const IsaKernels& kernels, const Tensor& q,
                       const Tensor& k_cache, const Tensor& v_cache, const AttentionBatch& batch,
                       const AttentionShape& shape, const Tensor& out,
                       bool batch_invariant = false);
absl::Status SwiGlu(ThreadPool& pool, const IsaKernels& kernels, const Tensor& gate_up,
                    const Tensor& out);
absl::Status Add(ThreadPool& pool, const Tensor& a, const Tensor& b, const Tensor& out);
absl::Status GatherRows(ThreadPool& pool, const Tensor& x, const Tensor& indices,
                        const Tensor& out);
absl::Status Copy(ThreadPool& pool, const Tensor& src, const Tensor& dst);
// Zero-fills dst on the pool's threads (each first-touches the pages it writes).
absl::Status Zero(ThreadPool& pool, const Tensor& dst);
absl::Status Sample(ThreadPool& pool, const Tensor& logits, const SamplingBatch& params,
                    const Tensor& tokens);

// Rows per parallel chunk so that a chunk touches at least ~16K elements: smaller ops are
// not worth waking a worker for.
inline int64_t RowGrain(int64_t cols) { return cols >= 16384 ? 1 : 16384 / (cols > 0 ? cols : 1); }

// f32 is the only compute dtype here; other float dtypes exist only as upload targets.
inline absl::Status ExpectF32(const char* what, const Tensor& t) {
  if (t.dtype == DType::kF32) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(what, " has dtype ", DTypeName(t.dtype), "; the CPU backend computes in f32"));
}

inline absl::Status ExpectDType(const char* what, const Tensor& t, DType d) {
  if (t.dtype == d) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " has dtype ", DTypeName(t.dtype), ", expected ", DTypeName(d)));
}

// Reductions with independent partial sums: without -ffast-math the compiler will not
// reorder a single accumulator, but it does vectorise eight of them.
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

inline float SumSquares(const float* a, int64_t n) { return Dot(a, a, n); }

}  // namespace saturn::cpu
