// The row and element-wise CUDA ops (kernels/cuda/ops.h: rms_norm.cu, embedding.cu,
// elementwise.cu, swiglu.cu, rope.cu, kv_write.cu, and the cuBLAS GEMM of gemm.cc), one test
// per op, each against its CPU twin on random, bf16-exact inputs of several shapes: outputs
// are poisoned with NaN first, then compared by normalised error within bf16 bounds. Widths
// that are whole 16-byte vectors take the vector kernels, others (and the misaligned views of
// the *Misaligned tests) the scalar ones. Attention and sampling have their own files.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "tests/kernels/cuda/cuda_test_util.h"

namespace saturn::testing {
namespace {

struct RowsCols {
  int rows;
  int cols;
};

// Readable CTest names: "Shapes/CudaOpTest.Embedding/17x768".
void PrintTo(const RowsCols& rc, std::ostream* os) { *os << rc.rows << "x" << rc.cols; }

// The outputs an op run produced, each read back as f32; compared one by one.
using Outputs = std::vector<std::vector<float>>;

void Take(Backend* b, const Tensor& t, Outputs& outs) { outs.push_back(ReadFloats(b, t)); }

// An output tensor in `dt` (unset: the compute dtype), poisoned with NaN.
DevTensor Output(Backend* b, int64_t rows, int64_t cols, std::optional<DType> dt = {}) {
  DevTensor d = FloatTensor(b, dt.value_or(b->compute_dtype()), rows, cols, {});
  Poison(b, d.t);
  return d;
}

// `host` in a buffer of the compute dtype, and views starting one element into it: not 16-byte
// aligned, so the vector kernels' alignment check must send them to the scalar kernels (a
// vector load there would fault or read the wrong elements).
struct Shifted {
  DevTensor buf;
  size_t elem_bytes;
  Tensor View(int64_t rows, int64_t cols) const {
    return Tensor{static_cast<char*>(buf.t.data) + elem_bytes, buf.t.dtype, rows, cols};
  }
};

Shifted ShiftedTensor(Backend* b, const std::vector<float>& host) {
  return Shifted{ComputeTensor(b, 1, static_cast<int64_t>(host.size()), host),
                 DTypeSize(b->compute_dtype())};
}

// The misaligned tests' inputs on one backend, for a [rows, cols] shape with n = rows * cols:
// x and r (n + 8 values), w (cols + 8), gate_up (2n + 8, in [-3, 3]) and a NaN output (n + 8).
struct ShiftedInputs {
  Shifted x, r, w, gate_up, out;
};

// The two backends are made once for the suite (its ~140 cases would otherwise each create a
// CUDA context's streams and cuBLAS handle); every case frees what it allocated.
class CudaOpTest : public ::testing::TestWithParam<RowsCols> {
 protected:
  static void SetUpTestSuite() {
    gpu_ = CudaOrNull();
    if (gpu_ == nullptr) return;
    auto cpu = CreateBackend("cpu", 2, "f32");
    if (cpu.ok()) {
      cpu_ = std::move(*cpu);
    } else {
      cpu_status_ = cpu.status();
    }
  }
  static void TearDownTestSuite() {
    cpu_.reset();
    gpu_.reset();
  }
  void SetUp() override {
    if (gpu_ == nullptr) GTEST_SKIP() << "no CUDA device: skipping";
    ASSERT_NE(cpu_, nullptr) << cpu_status_;
  }
  int rows() const { return GetParam().rows; }
  int cols() const { return GetParam().cols; }

  // Runs `op` on the CPU twin, then on the device; each run makes its tensors from the same
  // host values and takes its outputs. Every output must match within `tol`.
  void ExpectDeviceMatchesCpu(const std::function<void(Backend*, Outputs&)>& op,
                              double tol = kBf16Tolerance) {
    Outputs ref, got;
    op(cpu_.get(), ref);
    if (HasFatalFailure()) return;
    op(gpu_.get(), got);
    if (HasFatalFailure()) return;
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_LT(RelError(got[i], ref[i]), tol) << "output " << i;
    }
  }

  // The same over ShiftedInputs made on each backend from the same host values.
  void ExpectMisalignedMatchesCpu(
      const std::function<void(Backend*, const ShiftedInputs&, Outputs&)>& op) {
    const int64_t n = int64_t{rows()} * cols();
    const auto x = RandomValues(n + 8, 14), r = RandomValues(n + 8, 15),
               w = RandomValues(cols() + 8, 16), gu = RandomValues(2 * n + 8, 17, 3.0f);
    const std::vector<float> nan(n + 8, std::numeric_limits<float>::quiet_NaN());
    ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
      const ShiftedInputs in{ShiftedTensor(b, x), ShiftedTensor(b, r), ShiftedTensor(b, w),
                             ShiftedTensor(b, gu), ShiftedTensor(b, nan)};
      op(b, in, outs);
    });
  }

  // x [m, k] (the shape) times w [96, k]^T into an output of `out_dtype`.
  void ExpectGemmMatchesCpu(std::optional<DType> out_dtype, double tol) {
    const int m = rows(), k = cols(), n = 96;
    const auto x = RandomValues(m * k, 8), w = RandomValues(n * k, 9);
    ExpectDeviceMatchesCpu(
        [&](Backend* b, Outputs& outs) {
          DevTensor dx = ComputeTensor(b, m, k, x), dw = ComputeTensor(b, n, k, w),
                    out = Output(b, m, n, out_dtype);
          ASSERT_TRUE(b->Gemm(dx.t, dw.t, out.t).ok());
          Take(b, out.t, outs);
        },
        tol);
  }

  inline static std::unique_ptr<Backend> gpu_, cpu_;
  inline static absl::Status cpu_status_;
};

TEST_P(CudaOpTest, RmsNorm) {
  const int rows = this->rows(), cols = this->cols();
  const auto x = RandomValues(rows * cols, 1), w = RandomValues(cols, 3);
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor dx = ComputeTensor(b, rows, cols, x), dw = ComputeTensor(b, 1, cols, w),
              out = Output(b, rows, cols);
    ASSERT_TRUE(b->RmsNorm(dx.t, dw.t, 1e-5f, out.t).ok());
    Take(b, out.t, outs);
  });
}

// The output and the updated residual (x + residual).
TEST_P(CudaOpTest, AddRmsNorm) {
  const int rows = this->rows(), cols = this->cols();
  const auto x = RandomValues(rows * cols, 1), r = RandomValues(rows * cols, 2),
             w = RandomValues(cols, 3);
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor dx = ComputeTensor(b, rows, cols, x), dr = ComputeTensor(b, rows, cols, r),
              dw = ComputeTensor(b, 1, cols, w), out = Output(b, rows, cols);
    ASSERT_TRUE(b->AddRmsNorm(dx.t, dr.t, dw.t, 1e-5f, out.t).ok());
    Take(b, out.t, outs);
    Take(b, dr.t, outs);
  });
}

TEST_P(CudaOpTest, Embedding) {
  const int rows = this->rows(), cols = this->cols(), vocab = 97;
  const auto table = RandomValues(vocab * cols, 4);
  std::vector<int32_t> ids(rows);
  for (int i = 0; i < rows; ++i) ids[i] = (i * 37 + 11) % vocab;
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor dt = ComputeTensor(b, vocab, cols, table),
              di = RawTensor(b, DType::kI32, 1, rows, ids), emb = Output(b, rows, cols);
    ASSERT_TRUE(b->Embedding(di.t, dt.t, emb.t).ok());
    Take(b, emb.t, outs);
  });
}

TEST_P(CudaOpTest, Add) {
  const int rows = this->rows(), cols = this->cols();
  const auto a = RandomValues(rows * cols, 5), bb = RandomValues(rows * cols, 6);
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor da = ComputeTensor(b, rows, cols, a), db = ComputeTensor(b, rows, cols, bb),
              sum = Output(b, rows, cols);
    ASSERT_TRUE(b->Add(da.t, db.t, sum.t).ok());
    Take(b, sum.t, outs);
  });
}

TEST_P(CudaOpTest, SwiGlu) {
  const int rows = this->rows(), cols = this->cols();
  const auto gu = RandomValues(rows * 2 * cols, 7, 3.0f);
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor dg = ComputeTensor(b, rows, 2 * cols, gu), act = Output(b, rows, cols);
    ASSERT_TRUE(b->SwiGlu(dg.t, act.t).ok());
    Take(b, act.t, outs);
  });
}

TEST_P(CudaOpTest, Copy) {
  const int rows = this->rows(), cols = this->cols();
  const auto a = RandomValues(rows * cols, 5);
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor da = ComputeTensor(b, rows, cols, a), cp = Output(b, rows, cols);
    ASSERT_TRUE(b->Copy(da.t, cp.t).ok());
    Take(b, cp.t, outs);
  });
}

TEST_P(CudaOpTest, GatherRows) {
  const int rows = this->rows(), cols = this->cols();
  const auto a = RandomValues(rows * cols, 5);
  std::vector<int32_t> gather(std::max(1, rows / 2));
  for (size_t i = 0; i < gather.size(); ++i) gather[i] = static_cast<int32_t>((i * 3) % rows);
  const auto n = static_cast<int64_t>(gather.size());
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor da = ComputeTensor(b, rows, cols, a), dgi = RawTensor(b, DType::kI32, 1, n, gather),
              gat = Output(b, n, cols);
    ASSERT_TRUE(b->GatherRows(da.t, dgi.t, gat.t).ok());
    Take(b, gat.t, outs);
  });
}

TEST_P(CudaOpTest, Gemm) { ExpectGemmMatchesCpu(std::nullopt, kBf16Tolerance); }

// bf16 x bf16 -> f32 on CUDA (the logits GEMM): only accumulation order differs.
TEST_P(CudaOpTest, GemmF32Logits) { ExpectGemmMatchesCpu(DType::kF32, 1e-3); }

// Here the shape's rows are tokens; heads of 64, 4 query heads and 2 KV heads.
TEST_P(CudaOpTest, Rope) {
  const int tokens = rows(), hd = 64, hq = 4, hkv = 2;
  const auto q = RandomValues(tokens * hq * hd, 10), k = RandomValues(tokens * hkv * hd, 11);
  std::vector<int32_t> pos(tokens);
  for (int t = 0; t < tokens; ++t) pos[t] = (t * 131) % 2000;
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor dq = ComputeTensor(b, tokens, hq * hd, q), dk = ComputeTensor(b, tokens, hkv * hd, k),
              dp = RawTensor(b, DType::kI32, 1, tokens, pos);
    ASSERT_TRUE(b->Rope(dq.t, dk.t, dp.t, hd, 10000.0f).ok());
    Take(b, dq.t, outs);
    Take(b, dk.t, outs);
  });
}

// Here the shape's rows are tokens, written to distinct scattered slots of a larger cache.
TEST_P(CudaOpTest, KvWrite) {
  const int tokens = rows(), hd = 64, hkv = 2, cache_rows = 4 * tokens + 8;
  const auto k = RandomValues(tokens * hkv * hd, 11), v = RandomValues(tokens * hkv * hd, 12),
             cache = RandomValues(cache_rows * hkv * hd, 13);
  std::vector<int32_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = cache_rows - 1 - 3 * t;  // distinct, in range
  ExpectDeviceMatchesCpu([&](Backend* b, Outputs& outs) {
    DevTensor dk = ComputeTensor(b, tokens, hkv * hd, k),
              dv = ComputeTensor(b, tokens, hkv * hd, v),
              ds = RawTensor(b, DType::kI32, 1, tokens, slots),
              kc = ComputeTensor(b, cache_rows, hkv * hd, cache),
              vc = ComputeTensor(b, cache_rows, hkv * hd, cache);
    ASSERT_TRUE(b->KvWrite(dk.t, dv.t, ds.t, kc.t, vc.t).ok());
    Take(b, kc.t, outs);
    Take(b, vc.t, outs);
  });
}

// The same ops on views one element into their buffers (ShiftedInputs).
TEST_P(CudaOpTest, RmsNormMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    const Tensor out = in.out.View(rows, cols);
    ASSERT_TRUE(b->RmsNorm(in.x.View(rows, cols), in.w.View(1, cols), 1e-5f, out).ok());
    Take(b, out, outs);
  });
}

TEST_P(CudaOpTest, AddRmsNormMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    const Tensor out = in.out.View(rows, cols), r = in.r.View(rows, cols);
    ASSERT_TRUE(b->AddRmsNorm(in.x.View(rows, cols), r, in.w.View(1, cols), 1e-5f, out).ok());
    Take(b, out, outs);
    Take(b, r, outs);
  });
}

TEST_P(CudaOpTest, AddMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    const Tensor out = in.out.View(rows, cols);
    ASSERT_TRUE(b->Add(in.x.View(rows, cols), in.r.View(rows, cols), out).ok());
    Take(b, out, outs);
  });
}

TEST_P(CudaOpTest, SwiGluMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    const Tensor out = in.out.View(rows, cols);
    ASSERT_TRUE(b->SwiGlu(in.gate_up.View(rows, 2 * cols), out).ok());
    Take(b, out, outs);
  });
}

// Row indices for the misaligned row copies (embedding rows of x, a vocabulary of `rows`
// rows; gathered rows of r) and RoPE positions.
std::vector<int32_t> MisalignedIds(int rows) {
  std::vector<int32_t> ids(rows);
  for (int i = 0; i < rows; ++i) ids[i] = (i * 7 + 3) % rows;
  return ids;
}

TEST_P(CudaOpTest, EmbeddingMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  const std::vector<int32_t> ids = MisalignedIds(rows);
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    DevTensor di = RawTensor(b, DType::kI32, 1, rows, ids);
    const Tensor out = in.out.View(rows, cols);
    ASSERT_TRUE(b->Embedding(di.t, in.x.View(rows, cols), out).ok());
    Take(b, out, outs);
  });
}

TEST_P(CudaOpTest, GatherRowsMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  const std::vector<int32_t> ids = MisalignedIds(rows);
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    DevTensor di = RawTensor(b, DType::kI32, 1, rows, ids);
    const Tensor out = in.out.View(rows, cols);
    ASSERT_TRUE(b->GatherRows(in.r.View(rows, cols), di.t, out).ok());
    Take(b, out, outs);
  });
}

// KV rows (k from r, v from gate_up) written into x's and the output's buffers, every row.
TEST_P(CudaOpTest, KvWriteMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  std::vector<int32_t> slots(rows);
  for (int i = 0; i < rows; ++i) slots[i] = rows - 1 - i;
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    DevTensor ds = RawTensor(b, DType::kI32, 1, rows, slots);
    const Tensor kc = in.x.View(rows, cols), vc = in.out.View(rows, cols);
    ASSERT_TRUE(b->KvWrite(in.r.View(rows, cols), in.gate_up.View(rows, cols), ds.t, kc, vc).ok());
    Take(b, kc, outs);
    Take(b, vc, outs);
  });
}

// RoPE on heads of 32 (q: 2 heads in x's buffer, k: 1 in gate_up's) inside the misaligned
// buffers; needs rows of at least 96 columns.
TEST_P(CudaOpTest, RopeMisaligned) {
  const int rows = this->rows(), cols = this->cols();
  if (cols < 96) GTEST_SKIP() << "RoPE views need 96 columns, the shape has " << cols;
  const std::vector<int32_t> pos = MisalignedIds(rows);
  ExpectMisalignedMatchesCpu([&](Backend* b, const ShiftedInputs& in, Outputs& outs) {
    DevTensor dp = RawTensor(b, DType::kI32, 1, rows, pos);
    const Tensor q = in.x.View(rows, 64), k = in.gate_up.View(rows, 32);
    ASSERT_TRUE(b->Rope(q, k, dp.t, 32, 10000.0f).ok());
    Take(b, q, outs);
    Take(b, k, outs);
  });
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
}  // namespace saturn::testing
