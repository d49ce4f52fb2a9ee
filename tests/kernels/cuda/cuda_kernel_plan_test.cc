// The launch rules of the fused CUDA kernel set (kernels/cuda/kernel_plan.h), checked on the
// host: split-K decode attention's split count and ranges, the skinny GEMM's k slices and greedy
// sampling's vocabulary splits. The kernels run the same arithmetic on the device
// (tests/kernels/cuda/cuda_fused_kernels_test.cc checks their results where a GPU exists).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/kernel_plan.h"

namespace saturn::gpu {
namespace {

constexpr int kH200Sms = 132;

TEST(CudaKernelPlanTest, DecodeSplitsCoverTheSmsWithinEveryLimit) {
  // small at batch 1 (12 heads over 4 kv heads, head_dim 64), a 4096-position block table:
  // 4 blocks alone would leave 128 SMs idle; 32 splits make 128 blocks.
  EXPECT_EQ(DecodeSplits(1, 12, 4, 64, 4096, kH200Sms, 1 << 21), kSplitMaxSplits);
  // 1b at batch 1 (32 over 8, head_dim 64): 264 / 8 = 33, capped at 32.
  EXPECT_EQ(DecodeSplits(1, 32, 8, 64, 4096, kH200Sms, 1 << 21), 32);
  // Batch 64 x 4 kv heads = 256 blocks: 2 splits reach 2 blocks per SM.
  EXPECT_EQ(DecodeSplits(64, 12, 4, 64, 4096, kH200Sms, 1 << 21), 2);
  // Batch 256 x 8 kv heads already covers the SMs: no split, no combine.
  EXPECT_EQ(DecodeSplits(256, 32, 8, 64, 4096, kH200Sms, 1 << 21), 1);
  // A short block table: no split under kSplitMinPositions of capacity.
  EXPECT_EQ(DecodeSplits(1, 12, 4, 64, 256, kH200Sms, 1 << 21), 4);
  EXPECT_EQ(DecodeSplits(1, 12, 4, 64, 16, kH200Sms, 1 << 21), 1);
  // The workspace bounds the partials: 12 heads x 66 floats a split here.
  EXPECT_EQ(DecodeSplits(1, 12, 4, 64, 4096, kH200Sms, 12 * 66 * 5), 5);
  EXPECT_EQ(DecodeSplits(1, 12, 4, 64, 4096, kH200Sms, 0), 1);
  // Degenerate inputs never give fewer than one split.
  EXPECT_EQ(DecodeSplits(0, 12, 4, 64, 4096, kH200Sms, 1 << 21), 1);
  EXPECT_EQ(DecodeSplits(1, 12, 0, 64, 4096, kH200Sms, 1 << 21), 1);
  EXPECT_EQ(DecodeSplits(1, 12, 4, 64, 4096, 0, 1 << 21), 1);
  // Every answer, over a sweep, stays within its limits and fits the workspace.
  for (int64_t seqs : {1, 3, 8, 17, 64, 100, 256}) {
    for (int kvh : {1, 2, 4, 8}) {
      for (int64_t cap : {16, 64, 1000, 8192}) {
        const int64_t ws = 1 << 18;
        const int s = DecodeSplits(seqs, kvh * 4, kvh, 128, cap, kH200Sms, ws);
        ASSERT_GE(s, 1);
        ASSERT_LE(s, kSplitMaxSplits);
        if (s > 1) {
          ASSERT_LE(seqs * kvh * 4 * s * 130, ws);
          ASSERT_LE(s, cap / kSplitMinPositions);
        }
      }
    }
  }
}

TEST(CudaKernelPlanTest, SplitRangesTileTheContextExactly) {
  for (int splits = 1; splits <= kSplitMaxSplits; ++splits) {
    for (int ctx = 0; ctx <= 3000; ctx += (ctx < 200 ? 1 : 37)) {
      int next = 0;
      for (int i = 0; i < splits; ++i) {
        const SplitRange r = DecodeSplitRange(ctx, splits, i);
        ASSERT_EQ(r.begin, next) << "ctx " << ctx << " splits " << splits << " split " << i;
        ASSERT_LE(r.begin, r.end);
        ASSERT_TRUE(r.end - r.begin >= kSplitMinPositions || r.end == ctx)
            << "a split short of the minimum before the context's end";
        next = r.end;
      }
      ASSERT_EQ(next, ctx) << "ctx " << ctx << " splits " << splits;
    }
  }
}

// The split kernel's arithmetic on the host: each split's online softmax (max, sum,
// unnormalised V sum), then the combine's merge, equals softmax attention over the whole
// context, for any split count, empty splits included.
TEST(CudaKernelPlanTest, MergedSplitPartialsEqualWholeSoftmax) {
  std::mt19937 rng(5);
  std::normal_distribution<double> nd(0.0, 3.0);
  const int hd = 8;
  for (int ctx : {1, 63, 64, 65, 300, 2049}) {
    std::vector<double> score(ctx), v(size_t(ctx) * hd);
    for (double& x : score) x = nd(rng);
    for (double& x : v) x = nd(rng);
    double mx = -INFINITY;
    for (double s : score) mx = std::max(mx, s);
    std::vector<double> want(hd, 0.0);
    double sum = 0;
    for (int p = 0; p < ctx; ++p) {
      const double e = std::exp(score[p] - mx);
      sum += e;
      for (int d = 0; d < hd; ++d) want[d] += e * v[size_t(p) * hd + d];
    }
    for (double& x : want) x /= sum;
    for (int splits : {1, 2, 7, 32}) {
      struct Partial {
        double m = -INFINITY, l = 0;
        std::vector<double> acc = std::vector<double>(hd, 0.0);
      };
      std::vector<Partial> parts(splits);
      for (int i = 0; i < splits; ++i) {
        const SplitRange r = DecodeSplitRange(ctx, splits, i);
        Partial& pt = parts[i];
        for (int p = r.begin; p < r.end; ++p) {  // the kernel's online update
          const double m_new = std::max(pt.m, score[p]);
          const double corr = std::exp(pt.m - m_new), e = std::exp(score[p] - m_new);
          pt.l = pt.l * corr + e;
          for (int d = 0; d < hd; ++d) pt.acc[d] = pt.acc[d] * corr + e * v[size_t(p) * hd + d];
          pt.m = m_new;
        }
      }
      double gm = -INFINITY;
      for (const Partial& pt : parts) gm = std::max(gm, pt.m);
      for (int d = 0; d < hd; ++d) {  // the combine kernel's merge
        double gl = 0, o = 0;
        for (const Partial& pt : parts) {
          if (pt.m == -INFINITY) continue;
          const double f = std::exp(pt.m - gm);
          gl += pt.l * f;
          o += pt.acc[d] * f;
        }
        ASSERT_NEAR(o / gl, want[d], 1e-9) << "ctx " << ctx << " splits " << splits;
      }
    }
  }
}

TEST(CudaKernelPlanTest, SkinnySlicesFillTheSmsWithoutThinSlices) {
  // small's 768 x 768 at batch 1: 48 blocks of 16 columns alone; 2 slices of 384 give 96
  // (4 would be 192-element slices); the 2048-deep down projection goes to 8 slices of 256.
  EXPECT_EQ(SkinnySlices(768, 768, kH200Sms), 2);
  EXPECT_EQ(SkinnySlices(768, 2048, kH200Sms), 8);
  // 1b's 2048 x 2048: 128 blocks; two slices give 256, short of 264, four give 512.
  EXPECT_EQ(SkinnySlices(2048, 2048, kH200Sms), 4);
  // 1b's LM head (128256 rows): thousands of blocks already.
  EXPECT_EQ(SkinnySlices(128256, 2048, kH200Sms), 1);
  for (int64_t n : {1, 16, 768, 4096, 100000}) {
    for (int64_t k : {8, 256, 768, 8192}) {
      const int s = SkinnySlices(n, k, kH200Sms);
      ASSERT_TRUE(s == 1 || s == 2 || s == 4 || s == 8);
      if (s > 1) ASSERT_GE(k / s, kSkinnyMinSlice) << "n " << n << " k " << k;
    }
  }
}

TEST(CudaKernelPlanTest, SampleSplitsCoverTheSmsForFewGreedyRows) {
  // 1b's 128256-entry vocabulary at batch 1: 31 splits of at least 4096 entries (32 at most);
  // small's 32000 entries: 7. More rows: one wave of blocks, rows x splits <= 132.
  EXPECT_EQ(SampleSplits(1, 128256, kH200Sms), 31);
  EXPECT_EQ(SampleSplits(1, 256000, kH200Sms), kSampleMaxSplits);
  EXPECT_EQ(SampleSplits(1, 32000, kH200Sms), 7);
  EXPECT_EQ(SampleSplits(8, 128256, kH200Sms), 16);  // 128 blocks
  EXPECT_EQ(SampleSplits(64, 128256, kH200Sms), 2);
  EXPECT_EQ(SampleSplits(67, 128256, kH200Sms), 1);                 // a block a row fills the SMs
  EXPECT_EQ(SampleSplits(1, 8191, kH200Sms), 1);                    // no split under 4096 entries
  EXPECT_EQ(SampleSplits(kSampleMaxRows + 1, 1 << 20, 100000), 1);  // past the workspace
  EXPECT_EQ(SampleSplits(0, 32000, kH200Sms), 1);
  EXPECT_EQ(SampleSplits(1, 32000, 0), 1);
  for (int64_t rows : {1, 2, 7, 64, 200, 1024}) {
    for (int64_t vocab : {1, 4096, 32000, 128256, 256000}) {
      const int s = SampleSplits(rows, vocab, kH200Sms);
      ASSERT_GE(s, 1);
      ASSERT_LE(s, kSampleMaxSplits);
      if (s > 1) {
        ASSERT_GE(vocab / s, kSampleMinSplit) << rows << " x " << vocab;
        ASSERT_LE(rows * s, kH200Sms) << rows << " x " << vocab;
      }
    }
  }
}

}  // namespace
}  // namespace saturn::gpu
