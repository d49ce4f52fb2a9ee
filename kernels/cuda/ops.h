// Internal to the CUDA backend: one typed entry point per op family (each in its own .cu,
// GEMM in gemm.cc), all enqueued on an explicit stream. Shapes were checked by Backend
// (kernels/backend.cc); these check dtypes and the limits of their kernels and return a
// Status, never abort. Nothing here synchronizes or allocates.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/backend.h"

namespace saturn::gpu {

absl::Status Embedding(cudaStream_t s, const Tensor& ids, const Tensor& table, const Tensor& out);
absl::Status RmsNorm(cudaStream_t s, const Tensor& x, const Tensor& weight, float eps,
                     const Tensor& out);
absl::Status AddRmsNorm(cudaStream_t s, const Tensor& x, const Tensor& residual,
                        const Tensor& weight, float eps, const Tensor& out);
absl::Status Rope(cudaStream_t s, const Tensor& q, const Tensor& k, const Tensor& positions,
                  int head_dim, const RopeParams& rope);
absl::Status SwiGlu(cudaStream_t s, const Tensor& gate_up, const Tensor& out);
absl::Status Add(cudaStream_t s, const Tensor& a, const Tensor& b, const Tensor& out);
absl::Status GatherRows(cudaStream_t s, const Tensor& x, const Tensor& indices, const Tensor& out);
absl::Status Copy(cudaStream_t s, const Tensor& src, const Tensor& dst);
// dst[i] = bf16(src[i]) for n values (UploadF32's device-side conversion).
absl::Status ConvertF32ToBF16(cudaStream_t s, const float* src, void* dst, int64_t n);
absl::Status KvWrite(cudaStream_t s, const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                     const Tensor& k_cache, const Tensor& v_cache);
// Rope then KvWrite in one kernel (fused set; rope_kv_write.cu): k's rotated rows go only to the
// cache. All dtypes equal.
absl::Status RopeKvWrite(cudaStream_t s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& positions, int head_dim, const RopeParams& rope,
                         const Tensor& slot_mapping, const Tensor& k_cache, const Tensor& v_cache);
// One query row per sequence (batch.max_query_len == 1).
absl::Status AttentionDecode(cudaStream_t s, const Tensor& q, const Tensor& k_cache,
                             const Tensor& v_cache, const AttentionBatch& batch,
                             const AttentionShape& shape, const Tensor& out);
// Ragged chunks of any length, tiled with an online softmax.
absl::Status AttentionPrefill(cudaStream_t s, const Tensor& q, const Tensor& k_cache,
                              const Tensor& v_cache, const AttentionBatch& batch,
                              const AttentionShape& shape, const Tensor& out);
absl::Status Sample(cudaStream_t s, const Tensor& logits, const SamplingBatch& params,
                    const Tensor& tokens);
// Fused set: the same tokens, with greedy rows' vocabulary split over blocks where SampleSplits
// (kernel_plan.h) says so, else Sample. The workspace holds kSampleMaxRows x kSampleMaxSplits
// partials and a counter per row, zero between launches (allocated zeroed once); one stream
// uses it (launches on two streams at once would share the counters).
struct GreedySplitWorkspace {
  float* values = nullptr;
  int* indices = nullptr;
  unsigned* done = nullptr;
};
absl::Status SampleSplit(cudaStream_t s, int num_sms, const Tensor& logits,
                         const SamplingBatch& params, const Tensor& tokens,
                         const GreedySplitWorkspace& ws);
// out = x w^T through cuBLAS (handle already bound to the stream and a workspace).
absl::Status Gemm(cublasHandle_t h, const Tensor& x, const Tensor& w, const Tensor& out);
// The same with one warp per output in a fixed order: a row's result does not depend on M
// (--batch_invariant=on; gemm_invariant.cu).
absl::Status GemmInvariant(cudaStream_t s, const Tensor& x, const Tensor& w, const Tensor& out);

// --cuda_kernels=fused (kernel_plan.h sizes their grids from shapes alone).
// Split-K decode attention, all query heads of a kv head per block; splits > 1 write partials
// to `workspace` (num_seqs * num_heads * splits * (head_dim + 2) floats) and a combine kernel
// merges them. Applies where the GQA group is at most kSplitMaxGroup.
bool AttentionDecodeSplitApplies(const AttentionShape& shape);
absl::Status AttentionDecodeSplit(cudaStream_t s, const Tensor& q, const Tensor& k_cache,
                                  const Tensor& v_cache, const AttentionBatch& batch,
                                  const AttentionShape& shape, const Tensor& out, float* workspace,
                                  int64_t workspace_floats, int splits);
// A weight-streaming GEMM for 1..kSkinnyMaxRows rows, its output columns split over up to
// three tensors side by side (GemmSplit in one launch). Applies: matching f32 or bf16
// operands, out f32 or theirs, 16-byte rows.
bool GemmSkinnyApplies(const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs);
absl::Status GemmSkinny(cudaStream_t s, int num_sms, const Tensor& x, const Tensor& w,
                        absl::Span<const Tensor> outs);
// The same kernel with SwiGLU in its epilogue: act [M, F] = silu(x w_gate^T) * (x w_up^T),
// w = [gate; up] (2F rows); a warp reads gate row j and up row j, and gate_up is never
// written. Equals GemmSkinny into gate_up then SwiGlu, to the bit. Applies where GemmSkinny
// would for gate_up in act's dtype.
bool GemmSkinnySwiGluApplies(const Tensor& x, const Tensor& w, const Tensor& act);
absl::Status GemmSkinnySwiGlu(cudaStream_t s, int num_sms, const Tensor& x, const Tensor& w,
                              const Tensor& act);

// The kernel families, for the occupancy report (kernels/cuda/cuda_backend.h).
enum class KernelFamily : int {
  kEmbedding,
  kRmsNorm,
  kAddRmsNorm,
  kRope,
  kSwiGlu,
  kElementwise,
  kGatherRows,
  kConvert,
  kKvWrite,
  kAttentionDecode,
  kAttentionPrefill,
  kSample,
  kGemmInvariant,
  kAttentionCombine,
  kGemmSkinny,
  kRopeKvWrite,
  kCount
};
const char* KernelFamilyName(KernelFamily f);

// The latest launch of a family: which kernel, how many blocks of how many threads.
struct LaunchRecord {
  const void* kernel = nullptr;
  int64_t grid_blocks = 0;
  int threads = 0;
  size_t dynamic_smem = 0;
};
// Remembered per family by every launcher (host-side, cheap); thread-safe: written on the
// engine thread, read by diagnostics threads.
void RecordLaunch(KernelFamily f, const void* kernel, int64_t grid_blocks, int threads,
                  size_t dynamic_smem);
LaunchRecord LastLaunch(KernelFamily f);

}  // namespace saturn::gpu
