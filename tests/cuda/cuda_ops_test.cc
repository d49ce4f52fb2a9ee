// Each CUDA op against its CPU twin on random, bf16-exact inputs of several shapes: outputs
// are poisoned with NaN first, then compared by normalised error within bf16 bounds. Widths
// that are whole 16-byte vectors take the vector kernels, others (and misaligned views) the
// scalar ones. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/cuda/cuda_test_util.h"

namespace saturn {
namespace {

using testing::ComputeTensor;
using testing::DevTensor;
using testing::FloatTensor;
using testing::kBf16Tolerance;
using testing::Poison;
using testing::RandomValues;
using testing::RawTensor;
using testing::ReadFloats;
using testing::RelError;

struct RowsCols {
  int rows;
  int cols;
};

// Readable CTest names: "Shapes/CudaOpTest.Embedding/17x768".
void PrintTo(const RowsCols& rc, std::ostream* os) { *os << rc.rows << "x" << rc.cols; }

class CudaOpTest : public ::testing::TestWithParam<RowsCols> {
 protected:
  void SetUp() override {
    gpu_ = testing::CudaOrNull();
    if (gpu_ == nullptr) GTEST_SKIP() << "no CUDA device: skipping";
    auto cpu = CreateBackend("cpu", 2, "f32");
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
  }
  // Runs `op` on both backends over tensors made from the same host values and compares
  // the output tensor (index `out` in the list).
  std::unique_ptr<Backend> gpu_, cpu_;
};

TEST_P(CudaOpTest, RmsNormAndAddRmsNorm) {
  const auto [rows, cols] = GetParam();
  const auto x = RandomValues(rows * cols, 1), r = RandomValues(rows * cols, 2),
             w = RandomValues(cols, 3);
  std::vector<float> ref_out, ref_res, got_out, got_res;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    DevTensor dx = ComputeTensor(b, rows, cols, x), dr = ComputeTensor(b, rows, cols, r),
              dw = ComputeTensor(b, 1, cols, w), out = ComputeTensor(b, rows, cols, {});
    Poison(b, out.t);
    ASSERT_TRUE(b->RmsNorm(dx.t, dw.t, 1e-5f, out.t).ok());
    const auto plain = ReadFloats(b, out.t);
    Poison(b, out.t);
    ASSERT_TRUE(b->AddRmsNorm(dx.t, dr.t, dw.t, 1e-5f, out.t).ok());
    (b == cpu_.get() ? ref_out : got_out) = ReadFloats(b, out.t);
    (b == cpu_.get() ? ref_res : got_res) = ReadFloats(b, dr.t);
    if (b == cpu_.get()) {
      ref_out.insert(ref_out.end(), plain.begin(), plain.end());
    } else {
      got_out.insert(got_out.end(), plain.begin(), plain.end());
    }
  }
  EXPECT_LT(RelError(got_out, ref_out), kBf16Tolerance);
  EXPECT_LT(RelError(got_res, ref_res), kBf16Tolerance);
}

TEST_P(CudaOpTest, EmbeddingGatherAddSwiGluCopy) {
  const auto [rows, cols] = GetParam();
  const int vocab = 97;
  const auto table = RandomValues(vocab * cols, 4), a = RandomValues(rows * cols, 5),
             bb = RandomValues(rows * cols, 6), gu = RandomValues(rows * 2 * cols, 7, 3.0f);
  std::vector<int32_t> ids(rows);
  for (int i = 0; i < rows; ++i) ids[i] = (i * 37 + 11) % vocab;
  std::vector<int32_t> gather(std::max(1, rows / 2));
  for (size_t i = 0; i < gather.size(); ++i) gather[i] = static_cast<int32_t>((i * 3) % rows);
  std::vector<float> ref, got;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    DevTensor dt = ComputeTensor(b, vocab, cols, table),
              di = RawTensor(b, DType::kI32, 1, rows, ids), da = ComputeTensor(b, rows, cols, a),
              db = ComputeTensor(b, rows, cols, bb), dg = ComputeTensor(b, rows, 2 * cols, gu),
              dgi = RawTensor(b, DType::kI32, 1, static_cast<int64_t>(gather.size()), gather);
    DevTensor emb = ComputeTensor(b, rows, cols, {}), sum = ComputeTensor(b, rows, cols, {}),
              act = ComputeTensor(b, rows, cols, {}), cp = ComputeTensor(b, rows, cols, {}),
              gat = ComputeTensor(b, static_cast<int64_t>(gather.size()), cols, {});
    for (const Tensor* t : {&emb.t, &sum.t, &act.t, &cp.t, &gat.t}) Poison(b, *t);
    ASSERT_TRUE(b->Embedding(di.t, dt.t, emb.t).ok());
    ASSERT_TRUE(b->Add(da.t, db.t, sum.t).ok());
    ASSERT_TRUE(b->SwiGlu(dg.t, act.t).ok());
    ASSERT_TRUE(b->Copy(sum.t, cp.t).ok());
    ASSERT_TRUE(b->GatherRows(da.t, dgi.t, gat.t).ok());
    std::vector<float>& dst = b == cpu_.get() ? ref : got;
    for (const Tensor* t : {&emb.t, &sum.t, &act.t, &cp.t, &gat.t}) {
      const auto v = ReadFloats(b, *t);
      dst.insert(dst.end(), v.begin(), v.end());
    }
  }
  EXPECT_LT(RelError(got, ref), kBf16Tolerance);
}

TEST_P(CudaOpTest, GemmBf16AndF32Logits) {
  const auto [m, k] = GetParam();
  const int n = 96;
  const auto x = RandomValues(m * k, 8), w = RandomValues(n * k, 9);
  std::vector<float> ref_c, got_c, ref_f, got_f;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    DevTensor dx = ComputeTensor(b, m, k, x), dw = ComputeTensor(b, n, k, w),
              out = ComputeTensor(b, m, n, {}), logits = FloatTensor(b, DType::kF32, m, n, {});
    Poison(b, out.t);
    Poison(b, logits.t);
    ASSERT_TRUE(b->Gemm(dx.t, dw.t, out.t).ok());
    ASSERT_TRUE(b->Gemm(dx.t, dw.t, logits.t).ok());  // bf16 x bf16 -> f32 on CUDA
    (b == cpu_.get() ? ref_c : got_c) = ReadFloats(b, out.t);
    (b == cpu_.get() ? ref_f : got_f) = ReadFloats(b, logits.t);
  }
  EXPECT_LT(RelError(got_c, ref_c), kBf16Tolerance);
  EXPECT_LT(RelError(got_f, ref_f), 1e-3);  // f32 output: only accumulation order differs
}

TEST_P(CudaOpTest, RopeAndKvWrite) {
  const auto [tokens, unused] = GetParam();
  (void)unused;
  const int hd = 64, hq = 4, hkv = 2, cache_rows = 4 * tokens + 8;
  const auto q = RandomValues(tokens * hq * hd, 10), k = RandomValues(tokens * hkv * hd, 11),
             v = RandomValues(tokens * hkv * hd, 12),
             cache = RandomValues(cache_rows * hkv * hd, 13);
  std::vector<int32_t> pos(tokens), slots(tokens);
  for (int t = 0; t < tokens; ++t) {
    pos[t] = (t * 131) % 2000;
    slots[t] = cache_rows - 1 - 3 * t;  // distinct, scattered, in range
  }
  std::vector<float> ref, got;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    DevTensor dq = ComputeTensor(b, tokens, hq * hd, q), dk = ComputeTensor(b, tokens, hkv * hd, k),
              dv = ComputeTensor(b, tokens, hkv * hd, v),
              dp = RawTensor(b, DType::kI32, 1, tokens, pos),
              ds = RawTensor(b, DType::kI32, 1, tokens, slots),
              kc = ComputeTensor(b, cache_rows, hkv * hd, cache),
              vc = ComputeTensor(b, cache_rows, hkv * hd, cache);
    ASSERT_TRUE(b->Rope(dq.t, dk.t, dp.t, hd, 10000.0f).ok());
    ASSERT_TRUE(b->KvWrite(dk.t, dv.t, ds.t, kc.t, vc.t).ok());
    std::vector<float>& dst = b == cpu_.get() ? ref : got;
    for (const Tensor* t : {&dq.t, &dk.t, &kc.t, &vc.t}) {
      const auto r = ReadFloats(b, *t);
      dst.insert(dst.end(), r.begin(), r.end());
    }
  }
  EXPECT_LT(RelError(got, ref), kBf16Tolerance);
}

// Views one bf16 element into their buffers: the vector kernels' alignment check must send
// these to the scalar kernels (a vector load there would fault or read the wrong elements).
TEST_P(CudaOpTest, MisalignedViewsTakeTheScalarPath) {
  const auto [rows, cols] = GetParam();
  const int64_t n = int64_t{rows} * cols;
  const auto x = RandomValues(n + 8, 14), r = RandomValues(n + 8, 15),
             w = RandomValues(cols + 8, 16), gu = RandomValues(2 * n + 8, 17, 3.0f);
  std::vector<float> ref, got;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    const DType dt = b->compute_dtype();
    const size_t e = DTypeSize(dt);  // one element in: 2 bytes on CUDA, 4 on the CPU
    DevTensor bx = ComputeTensor(b, 1, n + 8, x), br = ComputeTensor(b, 1, n + 8, r),
              bw = ComputeTensor(b, 1, cols + 8, w), bg = ComputeTensor(b, 1, 2 * n + 8, gu),
              bo = ComputeTensor(b, 1, n + 8, {}), bc = ComputeTensor(b, 1, n + 8, r);
    auto view = [&](const DevTensor& d, int64_t rr, int64_t cc) {
      return Tensor{static_cast<char*>(d.t.data) + e, dt, rr, cc};
    };
    const Tensor vx = view(bx, rows, cols), vr = view(br, rows, cols), vw = view(bw, 1, cols),
                 vg = view(bg, rows, 2 * cols), vo = view(bo, rows, cols);
    std::vector<float>& dst = b == cpu_.get() ? ref : got;
    auto take = [&](const Tensor& t) {
      const auto v = ReadFloats(b, t);
      dst.insert(dst.end(), v.begin(), v.end());
    };
    ASSERT_TRUE(b->RmsNorm(vx, vw, 1e-5f, vo).ok());
    take(vo);
    ASSERT_TRUE(b->AddRmsNorm(vx, vr, vw, 1e-5f, vo).ok());
    take(vo);
    take(vr);
    ASSERT_TRUE(b->Add(vx, vr, vo).ok());
    take(vo);
    ASSERT_TRUE(b->SwiGlu(vg, vo).ok());
    take(vo);
    // Row copies: embedding rows of x, gathered rows of x, KV rows written into x's buffer.
    const int vocab = rows;
    std::vector<int32_t> ids(rows), slots(rows);
    for (int i = 0; i < rows; ++i) {
      ids[i] = (i * 7 + 3) % vocab;
      slots[i] = rows - 1 - i;
    }
    DevTensor di = RawTensor(b, DType::kI32, 1, rows, ids),
              ds = RawTensor(b, DType::kI32, 1, rows, slots);
    ASSERT_TRUE(b->Embedding(di.t, vx, vo).ok());
    take(vo);
    ASSERT_TRUE(b->GatherRows(vr, di.t, vo).ok());
    take(vo);
    const Tensor vc = view(bc, rows, cols);
    ASSERT_TRUE(b->KvWrite(vr, vo, ds.t, vx, vc).ok());
    take(vx);
    take(vc);
    // RoPE on heads of 32 (q: 2 heads, k: 1) inside the misaligned buffers.
    if (cols >= 96) {
      DevTensor dp = RawTensor(b, DType::kI32, 1, rows, ids);
      const Tensor q = view(bx, rows, 64), k = view(bg, rows, 32);
      ASSERT_TRUE(b->Rope(q, k, dp.t, 32, 10000.0f).ok());
      take(q);
      take(k);
    }
  }
  EXPECT_LT(RelError(got, ref), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaOpTest,
                         ::testing::Values(RowsCols{1, 64}, RowsCols{3, 256}, RowsCols{17, 768},
                                           RowsCols{64, 2048}, RowsCols{5, 1000},
                                           RowsCols{3, 100}),  // 100: not whole 16-byte vectors
                         [](const ::testing::TestParamInfo<RowsCols>& info) {
                           return std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.cols);
                         });

}  // namespace
}  // namespace saturn
