// The shape cost model (step_cost.h) matches what the runner's ops record, exactly, for
// decode, prefill and mixed steps of a real engine run on the CPU backend.
#include "engine/diag/step_cost.h"

#include <gtest/gtest.h>

#include "engine/engine.h"

namespace saturn {
namespace {

TEST(StepCostTest, MatchesRecordedStepsOfTheTinyModel) {
  EngineConfig cfg;
  cfg.model = "tiny";
  cfg.backend = "cpu";
  cfg.num_threads = 1;
  cfg.max_model_len = 128;
  cfg.max_num_seqs_limit = 4;
  cfg.options.max_num_seqs = 4;
  auto engine = Engine::Create(cfg);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    GenerateRequest r;
    for (int j = 0; j < 5 + 7 * i; ++j) r.prompt.push_back(3 + j);
    r.sampling.max_tokens = 4;
    r.sampling.ignore_eos = true;
    auto s = RequestStream::Open(engine->get(), r);
    ASSERT_TRUE(s.ok());
    streams.push_back(std::move(*s));
  }
  for (auto& s : streams) s->Drain(nullptr);
  {  // one alone: a whole-prompt prefill step and batch-1 decode steps, whatever the timing
    GenerateRequest r;
    for (int j = 0; j < 9; ++j) r.prompt.push_back(5 + j);
    r.sampling.max_tokens = 3;
    r.sampling.ignore_eos = true;
    auto solo = RequestStream::Open(engine->get(), r);
    ASSERT_TRUE(solo.ok());
    (*solo)->Drain(nullptr);
  }
  int checked = 0;
  for (const StepRecord& r : (*engine)->steps().Last(100)) {
    StepShape shape;
    if (r.num_prefill_tokens == 0) {
      shape = DecodeShape(r.num_seqs, double(r.context_tokens) / r.num_seqs);
      shape.context_tokens = r.context_tokens;
      shape.attended_pairs = r.context_tokens;
    } else if (r.num_seqs == 1) {  // one whole prompt
      shape = MixedShape(1, r.num_prefill_tokens, 0, 0, 0, true);
    } else {
      continue;
    }
    // The engine's weights and KV cache are f32 or bf16 (--dtype auto); activations f32.
    const EngineInfo info = (*engine)->info();
    const StepCost c = EstimateStepCost(info.model, 4, shape, DTypeSize(info.weight_dtype),
                                        DTypeSize(info.kv.dtype));
    for (size_t k = 0; k < kNumOpClasses; ++k) {
      SCOPED_TRACE(OpClassName(static_cast<OpClass>(k)));
      EXPECT_EQ(c[k].ops, r.by_class[k].count);
      EXPECT_NEAR(c[k].flops, r.by_class[k].flops, 1e-9 * r.by_class[k].flops + 1e-6);
      EXPECT_NEAR(c[k].bytes, r.by_class[k].bytes, 1e-9 * r.by_class[k].bytes + 1e-6);
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(StepCostTest, DecodeIsWeightBoundAtBatchOne) {
  const ModelConfig m = *PresetConfig("small");
  const StepCost c = EstimateStepCost(m, 4, DecodeShape(1, 100));
  const double weights = WeightBytesPerStep(m, 4);
  EXPECT_NEAR(c[size_t(OpClass::kGemm)].bytes, weights, 0.01 * weights);
  // FLOPs ~ 2 N per token (embedding table counted once, as the LM head).
  const double n = double(m.NumParameters());
  EXPECT_NEAR(c[size_t(OpClass::kGemm)].flops, 2 * n, 0.05 * 2 * n);
}

}  // namespace
}  // namespace saturn
