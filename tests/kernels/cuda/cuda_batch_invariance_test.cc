// --batch_invariant=on on the CUDA backend (kernels/cuda/gemm_invariant.cu, all attention
// through the prefill kernel): a GEMM row's bits are the same at every row count, the result
// matches the CPU within bf16 bounds, and 32 greedy requests with logprobs give bit-identical
// tokens and logprobs alone and all together. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace saturn::testing {
namespace {

std::unique_ptr<Backend> InvariantCudaOrNull() {
  auto b = CreateBackend("cuda", 0, "auto", "auto", "on");
  if (!b.ok()) return nullptr;
  return std::move(*b);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaBatchInvarianceTest, GemmRowsHaveTheSameBitsAtEveryRowCount) {
  std::unique_ptr<Backend> gpu = InvariantCudaOrNull();
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA device: skipping";
  auto cpu = CreateBackend("cpu", 1, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  for (int k : {768, 129}) {
    for (DType out_dtype : {DType::kBF16, DType::kF32}) {
      const int full = 70, n = 100;
      const auto x = RandomValues(static_cast<size_t>(full) * k, 3), w = RandomValues(n * k, 4);
      DevTensor dx = ComputeTensor(gpu.get(), full, k, x), dw = ComputeTensor(gpu.get(), n, k, w);
      DevTensor out = FloatTensor(gpu.get(), out_dtype, full, n, {});
      ASSERT_TRUE(gpu->Gemm(dx.t, dw.t, out.t).ok());
      const std::vector<float> all = ReadFloats(gpu.get(), out.t);
      // Correct as well as steady: against the CPU's f32 GEMM of the same bf16-exact values.
      DevTensor cx = ComputeTensor(cpu->get(), full, k, x), cw = ComputeTensor(cpu->get(), n, k, w);
      DevTensor ref = FloatTensor(cpu->get(), DType::kF32, full, n, {});
      ASSERT_TRUE((*cpu)->Gemm(cx.t, cw.t, ref.t).ok());
      EXPECT_LT(RelError(all, ReadFloats(cpu->get(), ref.t)), kBf16Tolerance) << "k " << k;
      for (int m : {1, 2, 7, 33, 64}) {
        const std::vector<float> head(x.begin(), x.begin() + static_cast<size_t>(m) * k);
        DevTensor px = ComputeTensor(gpu.get(), m, k, head);
        DevTensor pout = FloatTensor(gpu.get(), out_dtype, m, n, {});
        ASSERT_TRUE(gpu->Gemm(px.t, dw.t, pout.t).ok());
        const std::vector<float> part = ReadFloats(gpu.get(), pout.t);
        const std::vector<float> want(all.begin(), all.begin() + static_cast<size_t>(m) * n);
        EXPECT_TRUE(SameBits(part, want)) << "k " << k << ", " << m << " rows of " << full;
      }
    }
  }
}

GenerateRequest Request(int i) {
  GenerateRequest r;
  const int len = 3 + (i * 29) % 97;  // 3 .. 99 tokens, chunked by a 96-token budget
  for (int j = 0; j < len; ++j) r.prompt.push_back(3 + (i * 131 + j * 17) % 4000);
  r.sampling.max_tokens = 8;
  r.sampling.temperature = 0.f;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = 3;
  return r;
}

std::pair<std::vector<int>, std::vector<float>> Collect(RequestStream* s) {
  std::pair<std::vector<int>, std::vector<float>> out;
  TokenEvent ev;
  while (s->Next(&ev)) {
    out.first.insert(out.first.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (const PositionLogprobs& p : ev.logprobs) {
      out.second.push_back(p.token.logprob);
      for (const TokenLogprob& t : p.top) out.second.push_back(t.logprob);
    }
  }
  return out;
}

TEST(CudaBatchInvarianceTest, AloneAndTogetherGiveTheSameBits) {
  if (InvariantCudaOrNull() == nullptr) GTEST_SKIP() << "no CUDA device: skipping";
  constexpr int kRequests = 32;
  EngineConfig c = testing_engine::TinyConfig();
  c.backend = "cuda";
  c.dtype = "auto";
  c.batch_invariant = "on";
  c.max_num_seqs_limit = kRequests;
  c.options.max_num_seqs = kRequests;
  c.options.max_num_batched_tokens = 96;
  auto e = Engine::Create(c);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<std::pair<std::vector<int>, std::vector<float>>> alone;
  for (int i = 0; i < kRequests; ++i) {
    auto s = RequestStream::Open(e->get(), Request(i));
    ASSERT_TRUE(s.ok()) << s.status();
    alone.push_back(Collect(s->get()));
  }
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < kRequests; ++i) {
    auto s = RequestStream::Open(e->get(), Request(i));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(std::move(*s));
  }
  for (int i = 0; i < kRequests; ++i) {
    const auto together = Collect(streams[i].get());
    EXPECT_EQ(together.first, alone[i].first) << "request " << i;
    EXPECT_TRUE(SameBits(together.second, alone[i].second)) << "request " << i << ": logprobs";
  }
  testing_engine::WaitAllBlocksFree(e->get());
}

}  // namespace
}  // namespace saturn::testing
