// Launch shapes of the fused CUDA kernel set (--cuda_kernels=fused), chosen on the host from shapes
// alone, never from context lengths or data: a graph captured at one step replays at any
// other. Host-only and free of CUDA headers, so CPU tests check every rule
// (tests/kernels/cuda/cuda_kernel_plan_test.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace saturn::gpu {

// Blocks per SM a launch aims for: enough resident warps to keep loads in flight to HBM
// (Little's law: ~0.7 us x 4.8 TB/s / 132 SMs is ~25 KB in flight per SM on an H200).
constexpr int kBlocksPerSm = 2;

// Split-K decode attention (attention_decode_split.cu): one block per (kv head, sequence,
// split), all query heads of the kv head's group from one read of K and V.
constexpr int kSplitMaxGroup = 8;       // query heads per kv head the kernel holds in registers
constexpr int kSplitMaxSplits = 32;     // partials the combine kernel merges per row
constexpr int kSplitMinPositions = 64;  // a split's share of the block table's capacity
// The backend's workspace for the partials, allocated once (a captured graph keeps the
// pointer); DecodeSplits falls back to fewer splits, down to none, where it runs short.
constexpr size_t kSplitWorkspaceBytes = size_t{8} << 20;

// Splits per sequence: enough (kv head, sequence, split) blocks to cover the SMs
// kBlocksPerSm times, at most kSplitMaxSplits, none shorter than kSplitMinPositions of the
// block table's capacity, and no more partials than the workspace holds
// (num_seqs * num_heads * splits * (head_dim + 2) floats). 1 means no partials: the block
// writes the output itself and no combine runs.
inline int DecodeSplits(int64_t num_seqs, int num_heads, int num_kv_heads, int head_dim,
                        int64_t capacity_positions, int num_sms, int64_t workspace_floats) {
  if (num_seqs <= 0 || num_kv_heads <= 0 || num_sms <= 0) return 1;
  const int64_t blocks = num_seqs * num_kv_heads;
  const int64_t target = int64_t{num_sms} * kBlocksPerSm;
  int64_t splits = (target + blocks - 1) / blocks;
  splits = std::min<int64_t>(splits, kSplitMaxSplits);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, capacity_positions / kSplitMinPositions));
  const int64_t per_split = num_seqs * num_heads * (int64_t{head_dim} + 2);
  if (per_split > 0) splits = std::min<int64_t>(splits, workspace_floats / per_split);
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

// The positions [begin, end) of split `split` of a context of `ctx` positions: equal chunks,
// none under kSplitMinPositions, so a short context leaves the last splits empty (they write
// an empty partial). The same arithmetic runs in the kernel.
struct SplitRange {
  int begin, end;
};
inline SplitRange DecodeSplitRange(int ctx, int splits, int split) {
  int chunk = (ctx + splits - 1) / std::max(splits, 1);
  chunk = std::max(chunk, kSplitMinPositions);
  const int begin = std::min(ctx, split * chunk);
  return {begin, std::min(ctx, begin + chunk)};
}

// Skinny GEMM (gemm_skinny.cu): rows of x (M) at most kSkinnyMaxRows; a block of
// kSkinnyWarps warps, each warp kSkinnyCols output columns over a slice of k.
constexpr int kSkinnyMaxRows = 16;
constexpr int kSkinnyWarps = 8;
constexpr int kSkinnyCols = 2;
constexpr int64_t kSkinnyMinSlice = 256;  // k elements a warp's slice keeps at least

// Warps sharing one column pair's k (1, 2, 4 or 8): the fewest that give kBlocksPerSm blocks
// per SM, no slice under kSkinnyMinSlice elements.
inline int SkinnySlices(int64_t n, int64_t k, int num_sms) {
  const int64_t target = int64_t{std::max(num_sms, 1)} * kBlocksPerSm;
  int slices = 1;
  while (slices < kSkinnyWarps) {
    const int64_t cols_per_block = int64_t{kSkinnyWarps / slices} * kSkinnyCols;
    const int64_t blocks = (n + cols_per_block - 1) / cols_per_block;
    if (blocks >= target || k / (slices * 2) < kSkinnyMinSlice) break;
    slices *= 2;
  }
  return slices;
}

// Greedy sampling over splits (sampling.cu's split kernel): where few rows would leave SMs
// idle with one block a row, a greedy row's vocabulary is split over blocks, one wave of them:
// the kernel's 512 threads at ~104 registers leave room for one resident block per SM, so
// rows x splits stays within the SM count. At most kSampleMaxSplits, none under
// kSampleMinSplit entries; 1 (the one-block kernel) where that gives no split or rows pass
// kSampleMaxRows (the workspace's).
constexpr int kSampleMaxSplits = 32;
constexpr int64_t kSampleMinSplit = 4096;
constexpr int kSampleMaxRows = 1024;
inline int SampleSplits(int64_t rows, int64_t vocab, int num_sms) {
  if (rows <= 0 || rows > kSampleMaxRows || num_sms <= 0) return 1;
  int64_t splits = int64_t{num_sms} / rows;
  splits = std::min<int64_t>(splits, kSampleMaxSplits);
  splits = std::min<int64_t>(splits, vocab / kSampleMinSplit);
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

}  // namespace saturn::gpu
