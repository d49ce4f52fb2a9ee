// The model runner on the CUDA backend: the tiny model's logits against the CPU runner,
// graph replay equal to eager at every captured size (padding included), chunked prefill
// then decode, and the real Scheduler driving the runner through preemption and a cancel.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <map>

#include "engine/model/weights.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "tests/engine/runner_test_util.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace saturn {
namespace {

using testing::RelError;

constexpr double kForwardTolerance = 3e-2;  // bf16 activations through every layer

ModelWeights TinyWeights() { return testing_runner::TinyWeights(1234); }

RunnerConfig TinyRunnerConfig(int num_kv_blocks = 64) {
  return RunnerConfig{.max_num_seqs_limit = 16,
                      .max_num_batched_tokens_limit = 512,
                      .max_model_len = 256,
                      .block_size = 16,
                      .num_kv_blocks = num_kv_blocks,
                      .graph_sizes = {1, 2, 4, 8}};
}

std::vector<int> Tokens(int n, int salt) {
  std::vector<int> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 131 + salt * 17 + 3) % 4000 + 5;
  return t;
}

ScheduledSeq Seq(int64_t id, std::vector<int> tokens, int start, std::vector<int> blocks,
                 bool prefill, bool sample, float temperature = 0.0f, int step = 0) {
  ScheduledSeq s;
  s.request_id = id;
  s.token_ids = std::move(tokens);
  s.start_position = start;
  s.block_table = std::move(blocks);
  s.is_prefill = prefill;
  s.sample = sample;
  s.sampling.temperature = temperature;
  s.sampling.seed = 100 + id;
  s.sample_step = step;
  return s;
}

StepPlan Plan(std::vector<ScheduledSeq> seqs) {
  StepPlan p;
  for (const ScheduledSeq& s : seqs) {
    (s.is_prefill ? p.num_prefill_tokens : p.num_decode_tokens) += s.num_new_tokens();
  }
  p.seqs = std::move(seqs);
  return p;
}

struct Runners {
  std::unique_ptr<Backend> cpu, gpu;
  std::unique_ptr<ModelRunner> cpu_runner, gpu_runner;
};

TEST(CudaRunnerTest, TinyForwardLogitsMatchCpu) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const ModelWeights w = TinyWeights();
  auto rc = ModelRunner::Create(cpu->get(), w, TinyRunnerConfig());
  auto rg = ModelRunner::Create(gpu.get(), w, TinyRunnerConfig());
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_TRUE(rg.ok()) << rg.status();
  const std::vector<StepPlan> steps = {
      Plan(
          {Seq(1, Tokens(7, 1), 0, {0}, true, true), Seq(2, Tokens(20, 2), 0, {5, 2}, true, true)}),
      Plan({Seq(1, {42}, 7, {0}, false, true), Seq(2, {43}, 20, {5, 2}, false, true)}),
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(i);
    std::vector<float> want, got;
    ASSERT_TRUE((*rc)->ExecuteWithLogits(steps[i], &want).ok());
    ASSERT_TRUE((*rg)->ExecuteWithLogits(steps[i], &got).ok());
    ASSERT_EQ(got.size(), 2u * w.config.vocab_size);
    EXPECT_LT(RelError(got, want), kForwardTolerance);
  }
}

// Eager at the padded size runs cuBLAS with the same M as the replay, so the real rows are
// bitwise equal and the sampled tokens (here with temperature) must agree exactly.
TEST(CudaRunnerTest, GraphReplayEqualsEagerAtEveryCapturedSize) {
  SATURN_REQUIRE_CUDA(gpu);
  auto runner = ModelRunner::Create(gpu.get(), TinyWeights(), TinyRunnerConfig());
  ASSERT_TRUE(runner.ok()) << runner.status();
  ModelRunner& r = **runner;
  std::vector<ScheduledSeq> prefill;
  prefill.reserve(8);
  for (int i = 0; i < 8; ++i) prefill.push_back(Seq(i, Tokens(3 + i, i), 0, {i}, true, true));
  ASSERT_TRUE(r.Execute(Plan(prefill), false).ok());
  ASSERT_TRUE(r.SetUseGraphs(true).ok());
  EXPECT_EQ(r.graph_info().sizes, (std::vector<int>{1, 2, 4, 8}));
  for (int b : {1, 2, 3, 4, 5, 8}) {
    SCOPED_TRACE(b);
    const int padded = b <= 1 ? 1 : b <= 2 ? 2 : b <= 4 ? 4 : 8;
    std::vector<ScheduledSeq> real, eager;
    for (int i = 0; i < padded; ++i) {
      // Dummy rows of the eager plan use blocks 20+ so they never touch the real ones.
      ScheduledSeq s = i < b ? Seq(i, {50 + i}, 3 + i, {i}, false, true, 0.8f, 1)
                             : Seq(100 + i, {7}, 0, {20 + i}, false, true);
      if (i < b) real.push_back(s);
      eager.push_back(s);
    }
    ASSERT_TRUE(r.SetUseGraphs(false).ok());
    auto e = r.Execute(Plan(eager), false);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_FALSE(e->graph_replayed);
    ASSERT_TRUE(r.SetUseGraphs(true).ok());
    auto g = r.Execute(Plan(real), true);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(g->graph_replayed);
    EXPECT_EQ(g->graph_batch_size, padded);
    EXPECT_EQ(g->padding_tokens, padded - b);
    EXPECT_TRUE(g->timing.graph_replayed);
    EXPECT_GT(g->timing.device_span_us, 0.0);
    ASSERT_EQ(g->sampled.size(), static_cast<size_t>(b));
    EXPECT_EQ(g->sampled, std::vector<int>(e->sampled.begin(), e->sampled.begin() + b));
  }
}

TEST(CudaRunnerTest, ChunkedPrefillThenDecodeMatchesOneShotAndCpu) {
  SATURN_REQUIRE_CUDA(gpu);
  auto cpu = CreateBackend("cpu", 2, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const ModelWeights w = TinyWeights();
  auto rg = ModelRunner::Create(gpu.get(), w, TinyRunnerConfig());
  auto rc = ModelRunner::Create(cpu->get(), w, TinyRunnerConfig());
  ASSERT_TRUE(rg.ok()) << rg.status();
  ASSERT_TRUE(rc.ok()) << rc.status();
  const std::vector<int> prompt = Tokens(40, 9);
  const std::vector<int> one_blocks{0, 1, 2}, chunk_blocks{7, 4, 9};
  auto slice = [&](int b, int e) {
    return std::vector<int>(prompt.begin() + b, prompt.begin() + e);
  };
  std::vector<float> one_shot, chunked, cpu_chunked, scratch;
  ASSERT_TRUE(
      (*rg)->ExecuteWithLogits(Plan({Seq(1, prompt, 0, one_blocks, true, true)}), &one_shot).ok());
  for (auto [b, e] : {std::pair{0, 16}, std::pair{16, 32}, std::pair{32, 40}}) {
    const bool last = e == 40;
    const std::vector<int> blocks(chunk_blocks.begin(), chunk_blocks.begin() + (e + 15) / 16);
    const StepPlan p = Plan({Seq(2, slice(b, e), b, blocks, true, last)});
    ASSERT_TRUE((*rg)->ExecuteWithLogits(p, last ? &chunked : &scratch).ok());
    ASSERT_TRUE((*rc)->ExecuteWithLogits(p, last ? &cpu_chunked : &scratch).ok());
  }
  EXPECT_LT(RelError(chunked, one_shot), kForwardTolerance);
  EXPECT_LT(RelError(chunked, cpu_chunked), kForwardTolerance);
  // Decode the same token after both prefills.
  std::vector<float> d1, d2, dc;
  ASSERT_TRUE((*rg)->ExecuteWithLogits(Plan({Seq(1, {77}, 40, {0, 1, 2}, false, true)}), &d1).ok());
  ASSERT_TRUE(
      (*rg)->ExecuteWithLogits(Plan({Seq(2, {77}, 40, chunk_blocks, false, true)}), &d2).ok());
  ASSERT_TRUE(
      (*rc)->ExecuteWithLogits(Plan({Seq(2, {77}, 40, chunk_blocks, false, true)}), &dc).ok());
  EXPECT_LT(RelError(d2, d1), kForwardTolerance);
  EXPECT_LT(RelError(d2, dc), kForwardTolerance);
}

TEST(CudaRunnerTest, SchedulerDrivesPreemptionAndCancelOnTheDevice) {
  SATURN_REQUIRE_CUDA(gpu);
  const int blocks = 10, block_size = 16;
  auto runner = ModelRunner::Create(gpu.get(), TinyWeights(), TinyRunnerConfig(blocks));
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_TRUE((*runner)->SetUseGraphs(true).ok());
  SchedulerConfig sc;
  sc.max_num_seqs = 8;
  sc.max_num_batched_tokens = 64;
  sc.max_model_len = 256;
  Scheduler sched(sc, blocks, block_size);
  const int kRequests = 6, kMaxTokens = 24;
  for (int i = 0; i < kRequests; ++i) {
    GenerateRequest req;
    req.prompt = Tokens(20 + 4 * i, i);
    req.sampling.max_tokens = kMaxTokens;
    req.sampling.ignore_eos = true;
    req.sampling.temperature = i % 2 ? 0.7f : 0.0f;
    req.sampling.seed = i;
    sched.Add(i, req);
  }
  std::map<int64_t, std::vector<int>> out;
  std::map<int64_t, FinishReason> finish;
  bool preempted = false, replayed = false;
  for (int step = 0; step < 1000 && sched.HasWork(); ++step) {
    if (step == 6) EXPECT_TRUE(sched.Cancel(3));
    const StepPlan plan = sched.Schedule();
    preempted |= !plan.preempted.empty();
    if (plan.empty()) continue;
    auto r = (*runner)->Execute(plan, step % 4 == 0);
    ASSERT_TRUE(r.ok()) << r.status();
    replayed |= r->graph_replayed;
    for (const RequestUpdate& u : sched.Update(plan, r->sampled)) {
      for (int t : u.new_tokens) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, 4096);
        out[u.request_id].push_back(t);
      }
      if (u.finish != FinishReason::kNone) finish[u.request_id] = u.finish;
    }
  }
  EXPECT_FALSE(sched.HasWork());
  EXPECT_TRUE(preempted) << "10 blocks for 6 requests of up to 4 blocks should preempt";
  EXPECT_TRUE(replayed);
  for (int i = 0; i < kRequests; ++i) {
    if (i == 3) {
      EXPECT_LT(out[i].size(), static_cast<size_t>(kMaxTokens));
      continue;
    }
    EXPECT_EQ(out[i].size(), static_cast<size_t>(kMaxTokens)) << "request " << i;
    EXPECT_EQ(finish[i], FinishReason::kLength) << "request " << i;
  }
}

}  // namespace
}  // namespace saturn
