// Shared helpers for the CUDA tests: the skip when no device is present, bf16-exact random
// data, device tensors on either backend (on top of the CPU tests' DevTensor helpers,
// tests/kernels/cpu/cpu_test_util.h), read-back as f32 and the normalised error used to compare
// a CUDA op with its CPU twin. Test-only; header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/half_float.h"
#include "tests/kernels/cpu/cpu_test_util.h"

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

// One paged-attention call's inputs on the host (queries, caches, block tables, lengths).
struct PagedAttentionInputs {
  AttentionShape shape;
  int seqs = 0, tokens = 0, max_blocks = 0, max_query_len = 0, max_context_len = 0;
  int64_t cache_rows = 0, attended_pairs = 0, context_tokens = 0;
  std::vector<float> q, k_cache, v_cache;
  std::vector<int32_t> query_start, context_lens, block_tables;
};

// Random queries and caches over shuffled physical blocks (so block tables are really
// followed) for sequences of `query_lens` new rows over `context_lens` positions, with
// `spare_blocks` unused block-table columns per sequence; values uniform in +-scale.
inline PagedAttentionInputs MakePagedAttention(const AttentionShape& shape,
                                               const std::vector<int>& query_lens,
                                               const std::vector<int>& context_lens,
                                               int spare_blocks, uint32_t seed, float scale) {
  PagedAttentionInputs in;
  in.shape = shape;
  in.seqs = static_cast<int>(query_lens.size());
  const int bs = shape.block_size;
  in.max_context_len = *std::max_element(context_lens.begin(), context_lens.end());
  in.max_query_len = *std::max_element(query_lens.begin(), query_lens.end());
  in.max_blocks = (in.max_context_len + bs - 1) / bs + spare_blocks;
  const int num_blocks = in.seqs * in.max_blocks + 3;
  std::vector<int> phys(num_blocks);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), std::mt19937(seed));
  in.block_tables.resize(size_t(in.seqs) * in.max_blocks);
  in.query_start.assign(in.seqs + 1, 0);
  in.context_lens.resize(in.seqs);
  for (int s = 0; s < in.seqs; ++s) {
    for (int b = 0; b < in.max_blocks; ++b) {
      in.block_tables[size_t(s) * in.max_blocks + b] = phys[s * in.max_blocks + b];
    }
    in.query_start[s + 1] = in.query_start[s] + query_lens[s];
    in.context_lens[s] = context_lens[s];
    in.context_tokens += context_lens[s];
    for (int i = 0; i < query_lens[s]; ++i) {
      in.attended_pairs += context_lens[s] - query_lens[s] + i + 1;
    }
  }
  in.tokens = in.query_start[in.seqs];
  in.cache_rows = int64_t{num_blocks} * bs;
  const int64_t q_w = int64_t{shape.num_heads} * shape.head_dim,
                kv_w = int64_t{shape.num_kv_heads} * shape.head_dim;
  in.q = RandomValues(size_t(in.tokens * q_w), seed + 1, scale);
  in.k_cache = RandomValues(size_t(in.cache_rows * kv_w), seed + 2, scale);
  in.v_cache = RandomValues(size_t(in.cache_rows * kv_w), seed + 3, 1.0f);
  return in;
}

// Runs `in` on `b` (inputs in its compute dtype, the output poisoned first) and reads the
// output back as f32.
inline std::vector<float> RunPagedAttention(Backend* b, const PagedAttentionInputs& in) {
  const int q_w = in.shape.num_heads * in.shape.head_dim,
            kv_w = in.shape.num_kv_heads * in.shape.head_dim;
  DevTensor dq = ComputeTensor(b, in.tokens, q_w, in.q),
            dk = ComputeTensor(b, in.cache_rows, kv_w, in.k_cache),
            dv = ComputeTensor(b, in.cache_rows, kv_w, in.v_cache),
            out = ComputeTensor(b, in.tokens, q_w, {});
  DevTensor dqs = RawTensor(b, DType::kI32, 1, in.seqs + 1, in.query_start),
            dctx = RawTensor(b, DType::kI32, 1, in.seqs, in.context_lens),
            dtab = RawTensor(b, DType::kI32, in.seqs, in.max_blocks, in.block_tables);
  Poison(b, out.t);
  AttentionBatch batch{dqs.t,
                       dctx.t,
                       dtab.t,
                       in.seqs,
                       in.max_query_len,
                       in.max_context_len,
                       in.attended_pairs,
                       in.context_tokens};
  const absl::Status st = b->Attention(dq.t, dk.t, dv.t, batch, in.shape, out.t);
  EXPECT_TRUE(st.ok()) << b->name() << ": " << st;
  return st.ok() ? ReadFloats(b, out.t) : std::vector<float>{};
}

}  // namespace saturn::testing
