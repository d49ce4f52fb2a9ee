// Shared helpers for the CUDA tests: the skip when no device is present, bf16-exact random
// data, device tensors on either backend (on top of the CPU tests' DevTensor helpers,
// tests/kernels/cpu_test_util.h), read-back as f32 and the normalised error used to compare
// a CUDA op with its CPU twin. Test-only; header-only.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/half_float.h"
#include "tests/kernels/cpu_test_util.h"

namespace saturn::testing {

// The CUDA backend, or null (and the test skips) when this machine has no usable device.
inline std::unique_ptr<Backend> CudaOrNull() {
  auto b = CreateBackend("cuda");
  if (!b.ok()) return nullptr;
  return std::move(*b);
}

// `var` is the name the macro declares, so it cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define SATURN_REQUIRE_CUDA(var)                                            \
  std::unique_ptr<::saturn::Backend> var = ::saturn::testing::CudaOrNull(); \
  if (var == nullptr) GTEST_SKIP() << "no CUDA device: skipping"
// NOLINTEND(bugprone-macro-parentheses)

// Uniform in [-scale, scale], rounded to bf16 so both backends see identical inputs.
inline std::vector<float> RandomValues(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = Bf16ToF32(F32ToBf16(dist(rng)));
  return v;
}

// A [rows, cols] tensor of dtype `dt` filled from f32 host values (converted on upload).
inline DevTensor FloatTensor(Backend* b, DType dt, int64_t rows, int64_t cols,
                             const std::vector<float>& host) {
  DevTensor d = Empty(*b, dt, rows, cols);
  if (!host.empty()) {
    absl::Status s = b->UploadF32(host.data(), d.t);
    EXPECT_TRUE(s.ok()) << s;
  }
  return d;
}

// In the backend's compute dtype (bf16 on CUDA, f32 on CPU).
inline DevTensor ComputeTensor(Backend* b, int64_t rows, int64_t cols,
                               const std::vector<float>& host) {
  return FloatTensor(b, b->compute_dtype(), rows, cols, host);
}

// A tensor holding `host`'s bytes as they are (T matches the dtype's size).
template <typename T>
DevTensor RawTensor(Backend* b, DType dt, int64_t rows, int64_t cols, const std::vector<T>& host) {
  return FromHost(*b, dt, rows, cols, host);
}

// Fills a float tensor with NaN so that elements an op fails to write show up.
inline void Poison(Backend* b, const Tensor& t) {
  std::vector<float> nan(static_cast<size_t>(t.numel()), std::numeric_limits<float>::quiet_NaN());
  absl::Status s = b->UploadF32(nan.data(), t);
  EXPECT_TRUE(s.ok()) << s;
}

inline std::vector<float> ReadFloats(Backend* b, const Tensor& t) {
  if (t.dtype == DType::kF32) return ToHost<float>(*b, t);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kBF16) {
    const std::vector<uint16_t> raw = ToHost<uint16_t>(*b, t);
    for (size_t i = 0; i < raw.size(); ++i) out[i] = Bf16ToF32(raw[i]);
  } else {
    ADD_FAILURE() << "ReadFloats: unsupported dtype " << DTypeName(t.dtype);
  }
  return out;
}

// ||got - ref|| / ||ref||; infinity when sizes differ or any value is not finite.
inline double RelError(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) {
      return std::numeric_limits<double>::infinity();
    }
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

constexpr double kBf16Tolerance = 2e-2;

}  // namespace saturn::testing
