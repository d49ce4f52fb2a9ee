// CPU backend ops (all but attention and sampling) against float64 references on random
// data, plus memory/upload conversions, op records and error reporting through Backend.
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "absl/strings/match.h"
#include "tests/kernels/cpu_test_util.h"

namespace saturn::testing {
namespace {

class CpuOpsTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<Backend> b_ = MakeCpu(GetParam());
  std::mt19937 rng_{1234};
};

TEST_P(CpuOpsTest, Gemm) {
  for (auto [m, n, k] : {std::tuple{1, 7, 5}, std::tuple{1, 320, 768}, std::tuple{3, 17, 33},
                         std::tuple{64, 130, 96}, std::tuple{5, 1, 9}, std::tuple{8, 131, 77},
                         std::tuple{16, 64, 768}, std::tuple{17, 33, 40}, std::tuple{80, 20, 24}}) {
    std::vector<float> x = Random(rng_, m * k), w = Random(rng_, n * k);
    DevTensor dx = F32(*b_, m, k, x), dw = F32(*b_, n, k, w), out = Poisoned(*b_, m, n);
    ASSERT_TRUE(b_->Gemm(dx.t, dw.t, out.t).ok());
    std::vector<double> ref(m * n);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int l = 0; l < k; ++l) s += static_cast<double>(x[i * k + l]) * w[j * k + l];
        ref[i * n + j] = s;
      }
    }
    EXPECT_LT(RelErr(ToHost<float>(*b_, out.t), ref), kTol) << m << "x" << n << "x" << k;
  }
}

TEST_P(CpuOpsTest, Embedding) {
  const int vocab = 37, d = 19;
  std::vector<float> table = Random(rng_, vocab * d);
  std::vector<int32_t> ids = {0, 36, 5, 5, 17, 2, 36};
  DevTensor dt = F32(*b_, vocab, d, table), di = I32(*b_, 1, ids.size(), ids);
  DevTensor out = Poisoned(*b_, ids.size(), d);
  ASSERT_TRUE(b_->Embedding(di.t, dt.t, out.t).ok());
  std::vector<double> ref;
  for (int32_t id : ids)
    ref.insert(ref.end(), table.begin() + id * d, table.begin() + (id + 1) * d);
  EXPECT_LT(RelErr(ToHost<float>(*b_, out.t), ref), kTol);

  std::vector<int32_t> bad = {3, 37};
  DevTensor dbad = I32(*b_, 1, 2, bad);
  DevTensor out2 = Poisoned(*b_, 2, d);
  absl::Status s = b_->Embedding(dbad.t, dt.t, out2.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "embedding")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "37")) << s;
}

std::vector<double> RefRmsNorm(const std::vector<double>& x, const std::vector<float>& w, int rows,
                               int d, double eps) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int j = 0; j < d; ++j) ss += x[r * d + j] * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int j = 0; j < d; ++j) out[r * d + j] = x[r * d + j] * inv * w[j];
  }
  return out;
}

TEST_P(CpuOpsTest, RmsNormAndAddRmsNorm) {
  for (auto [rows, d] : {std::pair{1, 768}, std::pair{7, 13}, std::pair{40, 1000}}) {
    const float eps = 1e-5f;
    std::vector<float> x = Random(rng_, rows * d, -2, 2), res = Random(rng_, rows * d, -2, 2),
                       w = Random(rng_, d, 0.5, 1.5);
    DevTensor dx = F32(*b_, rows, d, x), dw = F32(*b_, 1, d, w), dres = F32(*b_, rows, d, res);
    DevTensor out = Poisoned(*b_, rows, d);
    ASSERT_TRUE(b_->RmsNorm(dx.t, dw.t, eps, out.t).ok());
    EXPECT_LT(RelErr(ToHost<float>(*b_, out.t),
                     RefRmsNorm(std::vector<double>(x.begin(), x.end()), w, rows, d, eps)),
              kTol);

    DevTensor out2 = Poisoned(*b_, rows, d);
    ASSERT_TRUE(b_->AddRmsNorm(dx.t, dres.t, dw.t, eps, out2.t).ok());
    std::vector<double> sum(rows * d);
    for (int i = 0; i < rows * d; ++i) sum[i] = static_cast<double>(x[i]) + res[i];
    EXPECT_LT(RelErr(ToHost<float>(*b_, dres.t), sum), kTol);
    EXPECT_LT(RelErr(ToHost<float>(*b_, out2.t), RefRmsNorm(sum, w, rows, d, eps)), kTol);
  }
}

void RefRope(std::vector<double>& x, int rows, int heads, int hd, const std::vector<int32_t>& pos,
             double theta) {
  for (int t = 0; t < rows; ++t) {
    for (int h = 0; h < heads; ++h) {
      double* v = &x[(t * heads + h) * hd];
      for (int i = 0; i < hd / 2; ++i) {
        const double a = pos[t] * std::pow(theta, -2.0 * i / hd);
        const double x1 = v[i], x2 = v[i + hd / 2];
        v[i] = x1 * std::cos(a) - x2 * std::sin(a);
        v[i + hd / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
}

TEST_P(CpuOpsTest, Rope) {
  for (auto [rows, hq, hk, hd, theta] :
       {std::tuple{1, 4, 1, 64, 10000.0f}, std::tuple{9, 6, 2, 6, 10000.0f},
        std::tuple{33, 8, 2, 128, 500000.0f}}) {
    std::vector<float> q = Random(rng_, rows * hq * hd), k = Random(rng_, rows * hk * hd);
    std::vector<int32_t> pos(rows);
    for (int t = 0; t < rows; ++t) pos[t] = static_cast<int32_t>(rng_() % 8192);
    DevTensor dq = F32(*b_, rows, hq * hd, q), dk = F32(*b_, rows, hk * hd, k);
    DevTensor dp = I32(*b_, 1, rows, pos);
    ASSERT_TRUE(b_->Rope(dq.t, dk.t, dp.t, hd, theta).ok());
    std::vector<double> rq(q.begin(), q.end()), rk(k.begin(), k.end());
    RefRope(rq, rows, hq, hd, pos, theta);
    RefRope(rk, rows, hk, hd, pos, theta);
    EXPECT_LT(RelErr(ToHost<float>(*b_, dq.t), rq), kTol) << rows << " " << hd;
    EXPECT_LT(RelErr(ToHost<float>(*b_, dk.t), rk), kTol) << rows << " " << hd;
  }
}

TEST_P(CpuOpsTest, KvWrite) {
  const int cache_rows = 48, width = 24, t = 5;
  std::vector<float> k = Random(rng_, t * width), v = Random(rng_, t * width);
  std::vector<float> kc = Random(rng_, cache_rows * width), vc = Random(rng_, cache_rows * width);
  std::vector<int32_t> slots = {47, 0, 13, 14, 30};
  DevTensor dk = F32(*b_, t, width, k), dv = F32(*b_, t, width, v);
  DevTensor dkc = F32(*b_, cache_rows, width, kc), dvc = F32(*b_, cache_rows, width, vc);
  DevTensor ds = I32(*b_, 1, t, slots);
  ASSERT_TRUE(b_->KvWrite(dk.t, dv.t, ds.t, dkc.t, dvc.t).ok());
  for (int i = 0; i < t; ++i) {
    std::copy(k.begin() + i * width, k.begin() + (i + 1) * width, kc.begin() + slots[i] * width);
    std::copy(v.begin() + i * width, v.begin() + (i + 1) * width, vc.begin() + slots[i] * width);
  }
  EXPECT_EQ(ToHost<float>(*b_, dkc.t), kc);
  EXPECT_EQ(ToHost<float>(*b_, dvc.t), vc);

  for (int32_t bad : {48, -1}) {
    DevTensor dbad = I32(*b_, 1, t, {1, 2, bad, 3, 4});
    absl::Status s = b_->KvWrite(dk.t, dv.t, dbad.t, dkc.t, dvc.t);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), "kv_write")) << s;
  }
}

TEST_P(CpuOpsTest, SwiGluAddGatherCopy) {
  for (auto [rows, f] : {std::pair{1, 11}, std::pair{6, 300}, std::pair{70, 512}}) {
    std::vector<float> gu = Random(rng_, rows * 2 * f, -4, 4);
    DevTensor dgu = F32(*b_, rows, 2 * f, gu), out = Poisoned(*b_, rows, f);
    ASSERT_TRUE(b_->SwiGlu(dgu.t, out.t).ok());
    std::vector<double> ref(rows * f);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < f; ++j) {
        const double g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j];
        ref[r * f + j] = g / (1 + std::exp(-g)) * u;
      }
    }
    EXPECT_LT(RelErr(ToHost<float>(*b_, out.t), ref), kTol);

    std::vector<float> a = Random(rng_, rows * f), c = Random(rng_, rows * f);
    DevTensor da = F32(*b_, rows, f, a), dc = F32(*b_, rows, f, c), sum = Poisoned(*b_, rows, f);
    ASSERT_TRUE(b_->Add(da.t, dc.t, sum.t).ok());
    std::vector<double> rsum(rows * f);
    for (int i = 0; i < rows * f; ++i) rsum[i] = static_cast<double>(a[i]) + c[i];
    EXPECT_LT(RelErr(ToHost<float>(*b_, sum.t), rsum), kTol);

    std::vector<int32_t> idx = {rows - 1, 0, rows / 2, rows - 1};
    DevTensor di = I32(*b_, 1, idx.size(), idx), g = Poisoned(*b_, idx.size(), f);
    ASSERT_TRUE(b_->GatherRows(da.t, di.t, g.t).ok());
    std::vector<double> rg;
    for (int32_t i : idx) rg.insert(rg.end(), a.begin() + i * f, a.begin() + (i + 1) * f);
    EXPECT_LT(RelErr(ToHost<float>(*b_, g.t), rg), kTol);

    DevTensor cp = Poisoned(*b_, rows, f);
    ASSERT_TRUE(b_->Copy(da.t, cp.t).ok());
    EXPECT_EQ(ToHost<float>(*b_, cp.t), a);
  }
  DevTensor x = F32(*b_, 3, 2, {1, 2, 3, 4, 5, 6}), out = Poisoned(*b_, 1, 2);
  DevTensor bad = I32(*b_, 1, 1, {3});
  absl::Status s = b_->GatherRows(x.t, bad.t, out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "gather_rows")) << s;
}

TEST_P(CpuOpsTest, LargeCopyUsesAllChunks) {
  const int64_t n = (1 << 20) + 3;  // big enough to be split across the pool
  std::vector<float> src = Random(rng_, n);
  DevTensor ds = F32(*b_, 1, n, src), dd = Poisoned(*b_, 1, n);
  ASSERT_TRUE(b_->Copy(ds.t, dd.t).ok());
  EXPECT_EQ(ToHost<float>(*b_, dd.t), src);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuOpsTest, ::testing::Values(1, 3));

TEST(CpuBackendTest, Properties) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  EXPECT_EQ(b->name(), "cpu");
  EXPECT_TRUE(absl::StrContains(b->device_name(), "(2 threads)")) << b->device_name();
  EXPECT_EQ(b->compute_dtype(), DType::kF32);
  EXPECT_GT(b->device_memory_bytes(), size_t{1} << 28);
  EXPECT_TRUE(b->per_op_timing_is_cheap());
  EXPECT_FALSE(b->SupportsGraphs());
  EXPECT_EQ(b->BeginGraphCapture().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(b->Synchronize().ok());
  EXPECT_FALSE(CreateCpuBackend(-1).ok());
  EXPECT_TRUE(absl::StrContains(MakeCpu(0)->device_name(), "threads"));
}

TEST(CpuBackendTest, AllocationIsAligned) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, size_t{1000003}}) {
    absl::StatusOr<DeviceBuffer> buf = b->Allocate(bytes);
    ASSERT_TRUE(buf.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 64, 0u);
    EXPECT_EQ(buf->bytes(), bytes);
  }
}

TEST(CpuBackendTest, UploadF32ConvertsWithRoundToNearestEven) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  const float inf = std::numeric_limits<float>::infinity();
  // value, expected bf16 bits, expected f16 bits
  const std::vector<std::tuple<float, uint16_t, uint16_t>> cases = {
      {1.0f, 0x3f80, 0x3c00},
      {-2.0f, 0xc000, 0xc000},
      {0.0f, 0x0000, 0x0000},
      {1.0f + 1.0f / 256, 0x3f80, 0x3c04},      // bf16 tie -> even (down)
      {1.0f + 3.0f / 256, 0x3f82, 0x3c0c},      // bf16 tie -> even (up)
      {1.0f + 1.0f / 2048, 0x3f80, 0x3c00},     // f16 tie -> even (down)
      {1.0f + 3.0f / 2048, 0x3f80, 0x3c02},     // f16 tie -> even (up)
      {65504.0f, 0x4780, 0x7bff},               // f16 max
      {65520.0f, 0x4780, 0x7c00},               // rounds to f16 inf
      {std::ldexp(1.0f, -24), 0x3380, 0x0001},  // smallest f16 subnormal
      {std::ldexp(1.0f, -25), 0x3300, 0x0000},  // tie -> even zero
      {std::ldexp(3.0f, -25), 0x33c0, 0x0002},  // 1.5 ulp -> 2 (even)
      {std::ldexp(1.0f, -14), 0x3880, 0x0400},  // smallest f16 normal
      {std::ldexp(1023.0f, -24) + std::ldexp(1.0f, -25), 0x3880, 0x0400},  // carries to normal
      {inf, 0x7f80, 0x7c00},
      {-inf, 0xff80, 0xfc00},
  };
  std::vector<float> host;
  for (auto [v, bf, h] : cases) host.push_back(v);
  const int64_t n = host.size();
  DevTensor dbf = Empty(*b, DType::kBF16, 1, n), dh = Empty(*b, DType::kF16, 1, n);
  ASSERT_TRUE(b->UploadF32(host.data(), dbf.t).ok());
  ASSERT_TRUE(b->UploadF32(host.data(), dh.t).ok());
  std::vector<uint16_t> got_bf = ToHost<uint16_t>(*b, dbf.t), got_h = ToHost<uint16_t>(*b, dh.t);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(got_bf[i], std::get<1>(cases[i])) << "bf16 of " << host[i];
    EXPECT_EQ(got_h[i], std::get<2>(cases[i])) << "f16 of " << host[i];
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(b->UploadF32(&nan, dbf.t.RowSlice(0, 1).Reshaped(1, 1)).ok());
  ASSERT_TRUE(b->UploadF32(&nan, dh.t.RowSlice(0, 1).Reshaped(1, 1)).ok());
  EXPECT_EQ(ToHost<uint16_t>(*b, dbf.t)[0] & 0x7fc0, 0x7fc0);
  EXPECT_EQ(ToHost<uint16_t>(*b, dh.t)[0] & 0x7e00, 0x7e00);
  DevTensor di = Empty(*b, DType::kI32, 1, 1);
  EXPECT_EQ(b->UploadF32(host.data(), di.t).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackendTest, NonF32GemmIsUnimplemented) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  DevTensor x = Empty(*b, DType::kBF16, 2, 4), w = Empty(*b, DType::kBF16, 3, 4);
  DevTensor out = Empty(*b, DType::kF32, 2, 3);
  absl::Status s = b->Gemm(x.t, w.t, out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(s.message(), "bf16")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "gemm")) << s;
}

TEST(CpuBackendTest, ShapeErrorsNameTheOp) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  DevTensor x = Empty(*b, DType::kF32, 2, 4), w = Empty(*b, DType::kF32, 3, 5);
  DevTensor out = Empty(*b, DType::kF32, 2, 3);
  absl::Status s = b->Gemm(x.t, w.t, out.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "gemm")) << s;

  DevTensor wn = Empty(*b, DType::kF32, 1, 5);
  s = b->RmsNorm(x.t, wn.t, 1e-5f, x.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "rms_norm")) << s;

  DevTensor odd = Empty(*b, DType::kF32, 2, 6), o2 = Empty(*b, DType::kF32, 2, 4);
  s = b->SwiGlu(odd.t, o2.t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "swiglu")) << s;
}

TEST(CpuBackendTest, OpRecordsHaveKindsAndDeviceIntervals) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  std::mt19937 rng(7);
  const int m = 32, k = 256, n = 256;
  DevTensor x = F32(*b, m, k, Random(rng, m * k)), w = F32(*b, n, k, Random(rng, n * k));
  DevTensor y = Poisoned(*b, m, n), nw = F32(*b, 1, n, Random(rng, n)), z = Poisoned(*b, m, n);
  b->BeginStep(/*per_op_device_times=*/true);
  ASSERT_TRUE(b->Gemm(x.t, w.t, y.t).ok());
  ASSERT_TRUE(b->RmsNorm(y.t, nw.t, 1e-5f, z.t).ok());
  ASSERT_TRUE(b->Add(y.t, z.t, y.t).ok());
  absl::StatusOr<StepTiming> timing = b->EndStep();
  ASSERT_TRUE(timing.ok()) << timing.status();
  ASSERT_EQ(timing->ops.size(), 3u);
  EXPECT_EQ(timing->ops[0].kind, OpKind::kGemm);
  EXPECT_EQ(timing->ops[1].kind, OpKind::kRmsNorm);
  EXPECT_EQ(timing->ops[2].kind, OpKind::kAdd);
  EXPECT_TRUE(timing->per_op_device_times);
  EXPECT_FALSE(timing->graph_replayed);
  double prev_end = 0;
  for (const OpRecord& op : timing->ops) {
    EXPECT_GE(op.device_begin_us, prev_end);
    EXPECT_GT(op.device_end_us, op.device_begin_us);
    EXPECT_GE(op.device_begin_us, op.issue_begin_us);
    EXPECT_LE(op.device_end_us, op.issue_end_us);
    EXPECT_GT(op.cost.bytes, 0);
    prev_end = op.device_end_us;
  }
  EXPECT_GT(timing->ops[0].cost.flops, 0);
  EXPECT_GT(timing->device_busy_us, 0);
  EXPECT_GE(timing->device_span_us, timing->device_busy_us);

  b->BeginStep(/*per_op_device_times=*/false);
  ASSERT_TRUE(b->Gemm(x.t, w.t, y.t).ok());
  timing = b->EndStep();
  ASSERT_TRUE(timing.ok());
  ASSERT_EQ(timing->ops.size(), 1u);
  EXPECT_LT(timing->ops[0].device_begin_us, 0);
}

}  // namespace
}  // namespace saturn::testing
