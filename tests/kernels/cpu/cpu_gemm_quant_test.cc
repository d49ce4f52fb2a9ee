// q8_0 / q4_0 weights on the CPU (kernels/quant_blocks.h, kernels/cpu/gemm/gemm_quant.inc,
// gemm_quant_vnni.cc): the block bytes are ggml's reference quantizer's (worked by hand for one
// block each), blocks dequantized and quantized again come back bit for bit, and the quantized
// GEMM (rows at every kernel level; panels with x as q8_0 where AVX512-VNNI runs) matches a
// float64 reference over the weights the blocks stand for and x as it multiplies it, at f32
// tolerance, for one to many input rows. Its rows are batch-invariant (each output row the same
// bits whatever M and the pool size), GemmSplit agrees with Gemm, and the errors name the operand
// and limit.
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/half_float.h"
#include "kernels/op_cost.h"
#include "kernels/quant_blocks.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

constexpr DType kFormats[] = {DType::kQ8_0, DType::kQ4_0};

std::vector<uint8_t> Quantize(DType d, const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> q(DTypeRowBytes(d, cols) * rows);
  EXPECT_TRUE(QuantizeRows(d, w.data(), rows, cols, q.data()).ok());
  return q;
}

std::vector<float> Dequantize(DType d, const std::vector<uint8_t>& q, int64_t rows, int64_t cols) {
  std::vector<float> w(rows * cols);
  EXPECT_TRUE(DequantizeRows(d, q.data(), rows, cols, w.data()).ok());
  return w;
}

TEST(QuantBlocksTest, SizesAndNames) {
  EXPECT_EQ(DTypeRowBytes(DType::kQ8_0, 64), 68u);
  EXPECT_EQ(DTypeRowBytes(DType::kQ4_0, 64), 36u);
  EXPECT_EQ(DTypeRowBytes(DType::kF32, 64), 256u);
  EXPECT_DOUBLE_EQ(DTypeBytesPerElement(DType::kQ8_0), 34.0 / 32);
  EXPECT_DOUBLE_EQ(DTypeBytesPerElement(DType::kQ4_0), 18.0 / 32);
  EXPECT_TRUE(IsBlockQuantized(DType::kQ4_0));
  EXPECT_FALSE(IsBlockQuantized(DType::kBF16));
  EXPECT_STREQ(DTypeName(DType::kQ8_0), "q8_0");
  EXPECT_STREQ(DTypeName(DType::kQ4_0), "q4_0");
  const Tensor t{nullptr, DType::kQ4_0, 3, 96, Layout::kRows};
  EXPECT_EQ(t.bytes(), 3u * 3 * 18);
}

// One block by hand: q8_0's d = 127 / 127 = 1, q = round(x) (halves away from zero).
TEST(QuantBlocksTest, Q8_0BlockIsGgmlReference) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = -2.5f;
  x[2] = 2.5f;
  x[3] = 0.49f;
  x[4] = -63.5f;
  const std::vector<uint8_t> q = Quantize(DType::kQ8_0, x, 1, 32);
  ASSERT_EQ(q.size(), 34u);
  uint16_t d;
  std::memcpy(&d, q.data(), 2);
  EXPECT_EQ(F16ToF32(d), 1.0f);
  const int8_t* v = reinterpret_cast<const int8_t*>(q.data() + 2);
  EXPECT_EQ(v[0], 127);
  EXPECT_EQ(v[1], -3);
  EXPECT_EQ(v[2], 3);
  EXPECT_EQ(v[3], 0);
  EXPECT_EQ(v[4], -64);
  EXPECT_EQ(v[5], 0);
}

// q4_0: the value of largest magnitude keeps its sign, d = it / -8, q = min(15, trunc(x/d + 8.5));
// two weights per byte, the block's first 16 in the low nibbles.
TEST(QuantBlocksTest, Q4_0BlockIsGgmlReference) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;   // the largest magnitude: d = -8 / -8 = 1, q = 0
  x[1] = 7.0f;    // 15
  x[16] = 3.4f;   // trunc(11.9) = 11
  x[17] = -3.5f;  // trunc(5.0) = 5
  const std::vector<uint8_t> q = Quantize(DType::kQ4_0, x, 1, 32);
  ASSERT_EQ(q.size(), 18u);
  uint16_t d;
  std::memcpy(&d, q.data(), 2);
  EXPECT_EQ(F16ToF32(d), 1.0f);
  EXPECT_EQ(q[2 + 0] & 15, 0);
  EXPECT_EQ(q[2 + 1] & 15, 15);
  EXPECT_EQ(q[2 + 0] >> 4, 11);
  EXPECT_EQ(q[2 + 1] >> 4, 5);
  EXPECT_EQ(q[2 + 2] & 15, 8);  // zeros sit at 8
  // A positive maximum flips d's sign: it maps to 0 as well.
  x.assign(32, 0.0f);
  x[5] = 4.0f;
  const std::vector<uint8_t> p = Quantize(DType::kQ4_0, x, 1, 32);
  std::memcpy(&d, p.data(), 2);
  EXPECT_EQ(F16ToF32(d), -0.5f);
  EXPECT_EQ(p[2 + 5] & 15, 0);
  EXPECT_EQ(Dequantize(DType::kQ4_0, p, 1, 32)[5], 4.0f);
}

TEST(QuantBlocksTest, RoundTripIsExactAndErrorIsBounded) {
  std::mt19937 rng(11);
  const int64_t rows = 9, cols = 160;
  for (DType d : kFormats) {
    SCOPED_TRACE(DTypeName(d));
    std::vector<float> w = Random(rng, rows * cols, -2.0f, 2.0f);
    w[7] = 0.0f;
    std::fill(w.begin() + cols, w.begin() + cols + 32, 0.0f);  // an all-zero block
    const std::vector<uint8_t> q = Quantize(d, w, rows, cols);
    const std::vector<float> back = Dequantize(d, q, rows, cols);
    // Dequantized blocks quantize to the same bytes (a GGUF file's blocks survive the trip).
    EXPECT_EQ(Quantize(d, back, rows, cols), q);
    // Each weight within half a step of its block's scale (q8_0's steps are 1/127 of the
    // max), or for q4_0 (steps of 1/8) a whole step: its 16 levels run from -8 to 7 steps, so
    // values of the sign opposite the largest clamp at 7; plus d's rounding to f16 (2^-11 of
    // it, times up to 127 or 8 steps); zeros stay zero.
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(w[r * cols + b * 32 + i]));
        const float step = d == DType::kQ8_0 ? amax / 127 : amax / 8;
        for (int i = 0; i < 32; ++i) {
          const int64_t j = r * cols + b * 32 + i;
          const float bound =
              d == DType::kQ8_0 ? (0.5f + 127.0f / 2048) * step : (1.0f + 8.0f / 2048) * step;
          EXPECT_LE(std::abs(back[j] - w[j]), bound + 1e-6f) << j;
        }
      }
    }
    EXPECT_EQ(back[cols + 3], 0.0f);
  }
}

TEST(QuantBlocksTest, RefusesPartialBlocksAndOtherTypes) {
  std::vector<float> w(40, 1.0f);
  std::vector<uint8_t> q(64);
  absl::Status s = QuantizeRows(DType::kQ8_0, w.data(), 1, 40, q.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "32")) << s;
  s = QuantizeRows(DType::kBF16, w.data(), 1, 32, q.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "bf16")) << s;
}

struct Shape {
  int m, n, k;
};
// One input row (the stream kernel, rows past and short of its tile), several (tiles of
// weight rows by input rows, with tails both ways), and k of one block to many.
const Shape kShapes[] = {{1, 1, 32},   {1, 7, 64},   {1, 203, 96}, {1, 320, 768}, {2, 17, 32},
                         {3, 33, 128}, {5, 203, 96}, {8, 64, 256}, {17, 9, 64},   {64, 130, 160}};

// Each way the CPU backend stores and multiplies quantized weights here: rows at every kernel
// level (x in f32), and the packed panels where AVX512-VNNI runs (x quantized to q8_0).
struct Case {
  cpu::Isa isa;
  Layout layout;
};
std::vector<Case> Cases() {
  std::vector<Case> out;
  for (cpu::Isa isa : SupportedIsas()) out.push_back({isa, Layout::kRows});
  if (cpu::IsaSupported(cpu::Isa::kAvx512) && cpu::DetectCpuFeatures().avx512_vnni) {
    out.push_back({cpu::Isa::kAvx512, Layout::kQuantPanels});
  }
  return out;
}
std::string Name(const Case& c, DType d) {
  return absl::StrCat(cpu::IsaName(c.isa), " ", DTypeName(d),
                      c.layout == Layout::kQuantPanels ? " panels" : " rows");
}

// What the GEMM multiplies x as: itself, or (panels) its q8_0 blocks dequantized.
std::vector<float> XAsMultiplied(const Case& c, const std::vector<float>& x, int m, int k) {
  if (c.layout != Layout::kQuantPanels) return x;
  return Dequantize(DType::kQ8_0, Quantize(DType::kQ8_0, x, m, k), m, k);
}

TEST(CpuGemmQuantTest, EveryIsaMatchesReference) {
  std::mt19937 rng(5);
  for (const Case& cs : Cases()) {
    for (DType d : kFormats) {
      SCOPED_TRACE(Name(cs, d));
      std::unique_ptr<Backend> b = MakeCpuIsa(2, cs.isa, DTypeName(d));
      ASSERT_EQ(b->weight_dtype(), d);
      EXPECT_TRUE(absl::StrContains(b->device_name(), std::string(DTypeName(d)) + " weights"));
      if (cs.layout == Layout::kQuantPanels) EXPECT_EQ(b->GemmWeightLayout(d), cs.layout);
      cpu::ThreadPool pool(2);
      for (const Shape& s : kShapes) {
        const std::vector<float> x = Random(rng, s.m * s.k), w = Random(rng, s.n * s.k);
        DevTensor dx = F32(*b, s.m, s.k, x), dw = Empty(*b, d, s.n, s.k, cs.layout);
        ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
        const std::vector<uint8_t> q = Quantize(d, w, s.n, s.k);
        if (cs.layout == Layout::kRows) {  // the device holds the reference quantizer's bytes
          std::vector<uint8_t> held(q.size());
          std::memcpy(held.data(), dw.t.data, q.size());
          EXPECT_EQ(held, q);
        }
        const std::vector<double> ref = GemmReference(XAsMultiplied(cs, x, s.m, s.k),
                                                      Dequantize(d, q, s.n, s.k), s.m, s.n, s.k);
        DevTensor out = Poisoned(*b, s.m, s.n);
        ASSERT_TRUE(b->Gemm(dx.t, dw.t, out.t).ok());
        EXPECT_LT(RelErr(ToHost<float>(*b, out.t), ref), kTol) << s.m << "x" << s.n << "x" << s.k;
        // The skinny path forced is the same kernel.
        DevTensor out2 = Poisoned(*b, s.m, s.n);
        ASSERT_TRUE(cpu::Gemm(pool, cpu::KernelsFor(cs.isa), nullptr, dx.t, dw.t, out2.t,
                              cpu::GemmPath::kSkinny)
                        .ok());
        EXPECT_EQ(ToHost<float>(*b, out2.t), ToHost<float>(*b, out.t));
      }
    }
  }
}

// x quantized to q8_0 (the panels) costs what llama.cpp's arithmetic costs: against the
// products with x in f32 the error stays near x's rounding (half a step of 1/127 of each
// block's largest magnitude).
TEST(CpuGemmQuantTest, PanelsErrorAgainstF32XIsXsRounding) {
  if (Cases().back().layout != Layout::kQuantPanels) GTEST_SKIP() << "no AVX512-VNNI here";
  std::mt19937 rng(21);
  const int m = 3, n = 96, k = 512;
  for (DType d : kFormats) {
    std::unique_ptr<Backend> b = MakeCpuIsa(2, cpu::Isa::kAvx512, DTypeName(d));
    const std::vector<float> x = Random(rng, m * k), w = Random(rng, n * k);
    DevTensor dx = F32(*b, m, k, x), dw = Empty(*b, d, n, k, Layout::kQuantPanels);
    ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
    DevTensor out = Poisoned(*b, m, n);
    ASSERT_TRUE(b->Gemm(dx.t, dw.t, out.t).ok());
    const std::vector<double> ref =
        GemmReference(x, Dequantize(d, Quantize(d, w, n, k), n, k), m, n, k);
    const double err = RelErr(ToHost<float>(*b, out.t), ref);
    EXPECT_GT(err, kTol) << DTypeName(d);  // x really is quantized
    EXPECT_LT(err, 0.01) << DTypeName(d);
  }
}

// Each output row is the same bits whether its input row runs alone or among others, at any
// position, and whatever the pool size: a decode step's logits do not depend on the batch.
TEST(CpuGemmQuantTest, BatchInvariantAcrossRowsAndThreads) {
  std::mt19937 rng(9);
  const int n = 203, k = 192, m = 19;
  for (const Case& cs : Cases()) {
    for (DType d : kFormats) {
      SCOPED_TRACE(Name(cs, d));
      std::unique_ptr<Backend> b = MakeCpuIsa(2, cs.isa, DTypeName(d));
      const std::vector<float> x = Random(rng, m * k), w = Random(rng, n * k);
      DevTensor dw = Empty(*b, d, n, k, cs.layout);
      ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
      DevTensor dx = F32(*b, m, k, x);
      DevTensor all = Poisoned(*b, m, n);
      ASSERT_TRUE(b->Gemm(dx.t, dw.t, all.t).ok());
      const std::vector<float> batched = ToHost<float>(*b, all.t);
      for (int rows : {1, 2, 3, 5, 8}) {
        for (int first = 0; first + rows <= m; first += 7) {
          const std::vector<float> sub(x.begin() + first * k, x.begin() + (first + rows) * k);
          DevTensor ds = F32(*b, rows, k, sub);
          DevTensor os = Poisoned(*b, rows, n);
          ASSERT_TRUE(b->Gemm(ds.t, dw.t, os.t).ok());
          const std::vector<float> got = ToHost<float>(*b, os.t);
          EXPECT_TRUE(std::equal(got.begin(), got.end(), batched.begin() + first * n))
              << rows << " rows from " << first;
        }
      }
      for (int threads : {1, 3}) {
        cpu::ThreadPool pool(threads);
        DevTensor o = Poisoned(*b, m, n);
        ASSERT_TRUE(
            cpu::Gemm(pool, cpu::KernelsFor(cs.isa), nullptr, dx.t, dw.t, o.t, cpu::GemmPath::kAuto)
                .ok());
        EXPECT_EQ(ToHost<float>(*b, o.t), batched) << threads << " threads";
      }
    }
  }
}

// GemmSplit (the fused QKV / gate-up projections) writes each part what Gemm on its rows does.
// Parts of 48 and 80 rows do not start on a panel (the panels' product goes through scratch);
// 64 and 64 do.
TEST(CpuGemmQuantTest, SplitMatchesGemm) {
  std::mt19937 rng(3);
  const int m = 4, k = 128;
  for (const auto [n0, n1] : {std::pair{48, 80}, std::pair{64, 64}})
    for (const Case& cs : Cases())
      for (DType d : kFormats) {
        SCOPED_TRACE(Name(cs, d) + " " + std::to_string(n0));
        std::unique_ptr<Backend> b = MakeCpuIsa(2, cs.isa, DTypeName(d));
        const std::vector<float> x = Random(rng, m * k), w = Random(rng, (n0 + n1) * k);
        DevTensor dx = F32(*b, m, k, x), dw = Empty(*b, d, n0 + n1, k, cs.layout);
        ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
        DevTensor whole = Poisoned(*b, m, n0 + n1), o0 = Poisoned(*b, m, n0),
                  o1 = Poisoned(*b, m, n1);
        ASSERT_TRUE(b->Gemm(dx.t, dw.t, whole.t).ok());
        ASSERT_TRUE(b->GemmSplit(dx.t, dw.t, {o0.t, o1.t}).ok());
        const std::vector<float> all = ToHost<float>(*b, whole.t), a = ToHost<float>(*b, o0.t),
                                 c = ToHost<float>(*b, o1.t);
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n0; ++j) EXPECT_EQ(a[i * n0 + j], all[i * (n0 + n1) + j]);
          for (int j = 0; j < n1; ++j) EXPECT_EQ(c[i * n1 + j], all[i * (n0 + n1) + n0 + j]);
        }
      }
}

TEST(CpuGemmQuantTest, ErrorsNameTheLimit) {
  std::unique_ptr<Backend> b = MakeCpuIsa(1, cpu::BestIsa(), "q8_0");
  cpu::ThreadPool pool(1);
  // Rows that are not whole blocks: refused at upload and by the GEMM.
  DevTensor w40 = Empty(*b, DType::kQ8_0, 2, 64);
  Tensor odd = w40.t;
  odd.cols = 40;
  std::vector<float> host(80, 1.0f);
  absl::Status s = b->UploadF32(host.data(), odd);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "blocks of 32")) << s;
  DevTensor x = F32(*b, 1, 40, std::vector<float>(40, 1.0f));
  DevTensor out = Poisoned(*b, 1, 2);
  s = cpu::Gemm(pool, cpu::KernelsFor(cpu::BestIsa()), nullptr, x.t, odd, out.t,
                cpu::GemmPath::kAuto);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "q8_0")) << s;
  // Paths that read f32 or bf16 weights are refused, naming the path.
  DevTensor w = Empty(*b, DType::kQ8_0, 2, 64);
  ASSERT_TRUE(b->UploadF32(std::vector<float>(128, 0.5f).data(), w.t).ok());
  DevTensor x64 = F32(*b, 1, 64, std::vector<float>(64, 1.0f));
  for (cpu::GemmPath p : {cpu::GemmPath::kBlocked, cpu::GemmPath::kBlas}) {
    s = cpu::Gemm(pool, cpu::KernelsFor(cpu::BestIsa()), nullptr, x64.t, w.t, out.t, p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), cpu::GemmPathName(p))) << s;
  }
  // Panels need the avx512 level with VNNI: a lower level refuses them, naming both.
  if (cpu::IsaSupported(cpu::Isa::kAvx512) && cpu::DetectCpuFeatures().avx512_vnni) {
    DevTensor wp = Empty(*b, DType::kQ8_0, 2, 64, Layout::kQuantPanels);
    ASSERT_TRUE(b->UploadF32(std::vector<float>(128, 0.5f).data(), wp.t).ok());
    s = cpu::Gemm(pool, cpu::KernelsFor(cpu::Isa::kAvx2), nullptr, x64.t, wp.t, out.t,
                  cpu::GemmPath::kAuto);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(s.message(), "VNNI")) << s;
  }
  // And the backend refuses an unknown weight format by name.
  CpuBackendOptions o;
  o.weight_dtype = "q5_k";
  absl::StatusOr<std::unique_ptr<Backend>> bad = CreateCpuBackend(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "q8_0")) << bad.status();
}

// The cost model counts a quantized weight's bytes as stored: 34 / 32 or 18 / 32 a weight.
TEST(CpuGemmQuantTest, CostCountsBlockBytes) {
  const Tensor x{nullptr, DType::kF32, 1, 4096, Layout::kRows};
  const Tensor out{nullptr, DType::kF32, 1, 4096, Layout::kRows};
  for (DType d : kFormats) {
    const Tensor w{nullptr, d, 4096, 4096, Layout::kRows};
    const Tensor wf{nullptr, DType::kF32, 4096, 4096, Layout::kRows};
    const double ratio = cost::Gemm(x, w, out).bytes / cost::Gemm(x, wf, out).bytes;
    EXPECT_NEAR(ratio, DTypeBytesPerElement(d) / 4, 0.002) << DTypeName(d);
  }
}

}  // namespace
}  // namespace saturn::testing
