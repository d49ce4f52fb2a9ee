// The engine's facade beyond requests: info() describes the engine it was created as (and the
// KV cache as it is now), and Calibrate measures the backend on the engine thread between two
// steps, pausing the loop rather than running beside it.
#include "engine/engine_info.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "tests/engine/engine_test_util.h"

namespace saturn {
namespace {

using testing_engine::Req;
using testing_engine::TinyConfig;
using testing_engine::WaitAllBlocksFree;

TEST(EngineInfoTest, DescribesTheEngineItWasCreatedAs) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  const EngineInfo info = (*e)->info();
  const ModelConfig tiny = *PresetConfig("tiny");
  EXPECT_EQ(info.model.name, "tiny");
  EXPECT_EQ(info.model.hidden_size, tiny.hidden_size);
  EXPECT_EQ(info.limits.vocab_size, tiny.vocab_size);
  EXPECT_EQ(info.limits.max_model_len, 256);
  EXPECT_EQ(info.max_num_seqs_limit, 16);
  EXPECT_EQ(info.max_num_batched_tokens_limit, 512);
  EXPECT_EQ(info.max_queued_requests, 0);
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_FALSE(info.device_name.empty());
  EXPECT_EQ(info.compute_dtype, DType::kF32);
  EXPECT_EQ(info.weight_dtype, DType::kF32);  // TinyConfig asks for f32 weights
  EXPECT_GT(info.device_memory_bytes, 0u);
  EXPECT_FALSE(info.supports_graphs);
  EXPECT_TRUE(info.per_op_timing_is_cheap);
  EXPECT_GT(info.weight_bytes, 0u);
  // The default capture sizes up to max_num_seqs_limit; none captured on the CPU.
  EXPECT_EQ(info.graph_sizes, (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_TRUE(info.graphs.sizes.empty());
  EXPECT_EQ(info.kv.block_size, 16);
  EXPECT_GT(info.kv.num_blocks, 0);
  EXPECT_EQ(info.kv.blocks_free, info.kv.num_blocks);
  EXPECT_EQ(info.kv.dtype, DType::kF32);  // auto: the weights'
  EXPECT_EQ(info.kv.bytes_per_block, ModelRunner::KvBytesPerBlock(tiny, 16, DType::kF32));
  EXPECT_EQ(info.kv.capacity_bytes, info.kv.bytes_per_block * info.kv.num_blocks);
  EXPECT_EQ((*e)->device_utilization(), -1);  // the CPU backend has no such counter
}

// A bf16 KV cache takes half the bytes a block, so the same kv_cache_bytes holds twice the
// blocks; with bf16 weights it is the default, and f32 can still be asked for.
TEST(EngineInfoTest, ABf16KvCacheHoldsTwiceTheBlocks) {
  const ModelConfig tiny = *PresetConfig("tiny");
  EngineConfig f32 = TinyConfig();
  f32.kv_cache_bytes = 64 * ModelRunner::KvBytesPerBlock(tiny, 16, DType::kF32);
  int blocks[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    EngineConfig c = f32;
    c.dtype = "bf16";
    c.kv_cache_dtype = i == 0 ? "f32" : "auto";
    auto e = Engine::Create(c);
    ASSERT_TRUE(e.ok()) << e.status();
    const EngineInfo info = (*e)->info();
    EXPECT_EQ(info.weight_dtype, DType::kBF16);
    EXPECT_EQ(info.kv.dtype, i == 0 ? DType::kF32 : DType::kBF16);
    EXPECT_EQ(info.kv.bytes_per_block, ModelRunner::KvBytesPerBlock(tiny, 16, info.kv.dtype));
    blocks[i] = info.kv.num_blocks;
    // It serves: a request's tokens come back and its blocks return.
    auto s = RequestStream::Open(e->get(), Req(20, 8));
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<int> tokens;
    (*s)->Drain(&tokens);
    EXPECT_EQ(tokens.size(), 8u);
    WaitAllBlocksFree(e->get());
  }
  EXPECT_EQ(blocks[0], 64);
  EXPECT_EQ(blocks[1], 128);
  EngineConfig bad = f32;
  bad.kv_cache_dtype = "int4";
  auto e = Engine::Create(bad);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(e.status().message(), "kv_cache_dtype")) << e.status();
}

TEST(EngineInfoTest, KvStatsAreTheCacheAsItIsNow) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  auto s = RequestStream::Open(e->get(), Req(40, 200));
  ASSERT_TRUE(s.ok()) << s.status();
  TokenEvent ev;
  ASSERT_TRUE((*s)->Next(&ev));  // the first token: the request holds its blocks
  ASSERT_FALSE(ev.final);
  const EngineInfo during = (*e)->info();
  EXPECT_LT(during.kv.blocks_free, during.kv.num_blocks);
  (*s)->Drain(nullptr);
  WaitAllBlocksFree(e->get());
}

TEST(EngineInfoTest, CalibrateRunsBetweenStepsWhileServing) {
  EngineConfig config = TinyConfig();
  config.options.max_num_seqs = 1;  // the requests run one after another: a long busy loop
  auto e = Engine::Create(config);
  ASSERT_TRUE(e.ok()) << e.status();
  constexpr int kRequests = 16, kTokens = 200;
  std::vector<std::unique_ptr<RequestStream>> streams;
  streams.reserve(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    streams.push_back(*RequestStream::Open(e->get(), Req(8 + i, kTokens)));
  }
  // Serving has begun: the first request's first token is out.
  TokenEvent first;
  ASSERT_TRUE(streams[0]->Next(&first));
  ASSERT_FALSE(first.final);
  CalibrationOptions options;
  options.quick = true;
  double took_ms = -1;
  const double t0 = NowUs();
  absl::StatusOr<Calibration> cal = (*e)->Calibrate(options, &took_ms);
  const double t1 = NowUs();
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_LT((*e)->counters().requests_finished, kRequests) << "calibrated while serving";
  EXPECT_EQ(cal->backend, "cpu");
  EXPECT_GT(cal->gemm_flops_per_s, 0);
  EXPECT_GT(cal->bandwidth_bytes_per_s, 0);
  EXPECT_GT(took_ms, 0);
  EXPECT_LE(took_ms * 1e3, t1 - t0);
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<int> tokens = i == 0 ? first.token_ids : std::vector<int>{};
    const TokenEvent fin = streams[i]->Drain(&tokens);
    EXPECT_EQ(fin.finish_reason, FinishReason::kLength);
    EXPECT_EQ(static_cast<int>(tokens.size()), kTokens);
  }
  // The loop paused for the measuring: two consecutive steps, both in the call's window,
  // leave a gap at least as long as it took.
  const std::vector<StepRecord> steps = (*e)->steps().Last(kRequests * (kTokens + 2));
  bool paused = false;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const StepRecord& a = steps[i];
    const StepRecord& b = steps[i + 1];
    if (b.start_us >= t0 && a.end_us <= t1 && b.start_us - a.end_us >= took_ms * 1e3) {
      paused = true;
    }
  }
  EXPECT_TRUE(paused);
}

TEST(EngineInfoTest, CalibrateAfterShutdownIsUnavailable) {
  auto e = Engine::Create(TinyConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  (*e)->Shutdown();
  EXPECT_EQ((*e)->Calibrate().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace saturn
