// Helpers shared by the CPU backend tests: device tensors filled from host vectors,
// NaN-poisoned outputs, seeded random data, the normalised error against a float64
// reference, and the fixture of the op tests swept over pool sizes. Test-only; owns no test
// cases.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace saturn::testing {

struct DevTensor {
  DeviceBuffer buf;
  Tensor t;
};

inline std::unique_ptr<Backend> MakeCpu(int threads) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(threads);
  EXPECT_TRUE(b.ok()) << b.status();
  return std::move(*b);
}

// A CPU backend running the kernels of `isa` (which the CPU must support) with f32 weights,
// batch-invariant (the default) unless told otherwise.
inline std::unique_ptr<Backend> MakeCpuIsa(int threads, cpu::Isa isa,
                                           const std::string& weight_dtype = "f32",
                                           bool batch_invariant = true,
                                           bool packed_weights = true) {
  CpuBackendOptions o;
  o.num_threads = threads;
  o.isa = isa;
  o.weight_dtype = weight_dtype;
  o.batch_invariant = batch_invariant;
  o.packed_weights = packed_weights;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return std::move(*b);
}

// Every kernel level this CPU runs, lowest first.
inline std::vector<cpu::Isa> SupportedIsas() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

inline DevTensor Empty(Backend& b, DType d, int64_t rows, int64_t cols,
                       Layout layout = Layout::kRows) {
  const Tensor shape{nullptr, d, rows, cols, layout};
  absl::StatusOr<DeviceBuffer> buf = b.Allocate(shape.bytes());
  EXPECT_TRUE(buf.ok()) << buf.status();
  DevTensor out{std::move(*buf), {}};
  out.t = out.buf.View(d, rows, cols);
  out.t.layout = layout;
  return out;
}

template <typename T>
DevTensor FromHost(Backend& b, DType d, int64_t rows, int64_t cols, const std::vector<T>& host) {
  EXPECT_EQ(static_cast<int64_t>(host.size()), rows * cols);
  EXPECT_EQ(sizeof(T), DTypeSize(d));
  DevTensor out = Empty(b, d, rows, cols);
  EXPECT_TRUE(b.Upload(host.data(), out.t).ok());
  return out;
}

inline DevTensor F32(Backend& b, int64_t rows, int64_t cols, const std::vector<float>& host) {
  return FromHost(b, DType::kF32, rows, cols, host);
}
inline DevTensor I32(Backend& b, int64_t rows, int64_t cols, const std::vector<int32_t>& host) {
  return FromHost(b, DType::kI32, rows, cols, host);
}
// An f32 output filled with NaN, so any element an op fails to write shows in the error.
inline DevTensor Poisoned(Backend& b, int64_t rows, int64_t cols) {
  return F32(b, rows, cols,
             std::vector<float>(rows * cols, std::numeric_limits<float>::quiet_NaN()));
}

template <typename T>
std::vector<T> ToHost(Backend& b, const Tensor& t) {
  std::vector<T> host(t.numel());
  EXPECT_TRUE(b.Download(t, host.data()).ok());
  return host;
}

inline std::vector<float> Random(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ||out - ref|| / ||ref||; infinity when out holds a NaN (an unwritten or broken element).
inline double RelErr(const std::vector<float>& out, const std::vector<double>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (std::isnan(out[i])) return std::numeric_limits<double>::infinity();
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// x [m, k] times w [n, k] transposed, in float64: the GEMM tests' reference.
inline std::vector<double> GemmReference(const std::vector<float>& x, const std::vector<float>& w,
                                         int m, int n, int k) {
  std::vector<double> ref(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int l = 0; l < k; ++l) s += static_cast<double>(x[i * k + l]) * w[j * k + l];
      ref[i * n + j] = s;
    }
  }
  return ref;
}

constexpr double kTol = 1e-5;

// One op's tests on a CPU backend of GetParam() threads, each test from the same seed:
//   class CpuRopeTest : public CpuOpTest {};
//   INSTANTIATE_TEST_SUITE_P(Threads, CpuRopeTest, ::testing::Values(1, 3), ThreadsName);
class CpuOpTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<Backend> b_ = MakeCpu(GetParam());
  std::mt19937 rng_{1234};
};

// Readable names for a pool-size sweep: "Threads/CpuRopeTest.Rope/3_threads".
inline std::string ThreadsName(const ::testing::TestParamInfo<int>& info) {
  return absl::StrCat(info.param, info.param == 1 ? "_thread" : "_threads");
}

}  // namespace saturn::testing
