// engine/measure/step_record_build.h: a step record says what the plan and the runner's output say,
// sums each op into its class (device time only where the op was timed), takes the ops, and
// reads the serving state from the scheduler.
#include "engine/measure/step_record_build.h"

#include "gtest/gtest.h"

namespace saturn {
namespace {

OpRecord Op(OpKind kind, double flops, double bytes, double begin = -1, double end = -1) {
  OpRecord r;
  r.kind = kind;
  r.cost = {flops, bytes};
  r.device_begin_us = begin;
  r.device_end_us = end;
  return r;
}

TEST(StepRecordBuildTest, RecordsThePlanTheRunnerOutputAndEachOpClass) {
  StepPlan plan;
  ScheduledSeq prefill;
  prefill.token_ids = {5, 6, 7, 8};
  prefill.start_position = 0;
  prefill.is_prefill = true;
  prefill.sample = true;
  ScheduledSeq decode;
  decode.token_ids = {9};
  decode.start_position = 10;
  decode.sample = true;
  plan.seqs = {decode, prefill};
  plan.num_prefill_tokens = 4;
  plan.num_decode_tokens = 1;
  plan.preempted = {42};

  RunnerOutput out;
  out.sampled = {3, 4};
  out.prepare_us = 12;
  out.graph_replayed = true;
  out.graph_batch_size = 4;
  out.padding_tokens = 2;
  out.timing.issue_us = 30;
  out.timing.device_busy_us = 80;
  out.timing.device_span_us = 100;
  out.timing.per_op_device_times = true;
  out.timing.ops = {Op(OpKind::kGemm, 100, 10, 0, 40), Op(OpKind::kGemm, 50, 5, 40, 60),
                    Op(OpKind::kRmsNorm, 7, 3),  // not timed: no device time
                    Op(OpKind::kAttention, 20, 8, 60, 80)};

  StepRecord rec;
  RecordStepWork(plan, &out, &rec);
  EXPECT_EQ(rec.prepare_us, 12);
  EXPECT_EQ(rec.issue_us, 30);
  EXPECT_EQ(rec.device_busy_us, 80);
  EXPECT_EQ(rec.device_span_us, 100);
  EXPECT_EQ(rec.gap_us, 20);
  EXPECT_TRUE(rec.per_op_timed);
  EXPECT_EQ(rec.op_count, 4);
  EXPECT_EQ(rec.num_seqs, 2);
  EXPECT_EQ(rec.num_prefill_tokens, 4);
  EXPECT_EQ(rec.num_decode_tokens, 1);
  EXPECT_EQ(rec.num_sampled, 2);
  EXPECT_EQ(rec.num_preempted, 1);
  EXPECT_EQ(rec.context_tokens, 11 + 4);
  EXPECT_TRUE(rec.graph_replayed);
  EXPECT_EQ(rec.graph_batch_size, 4);
  EXPECT_EQ(rec.padding_tokens, 2);

  const OpClassStats& gemm = rec.by_class[static_cast<size_t>(OpClass::kGemm)];
  EXPECT_EQ(gemm.count, 2);
  EXPECT_EQ(gemm.flops, 150);
  EXPECT_EQ(gemm.bytes, 15);
  EXPECT_EQ(gemm.device_us, 60);
  const OpClassStats& norm = rec.by_class[static_cast<size_t>(OpClass::kNorm)];
  EXPECT_EQ(norm.count, 1);
  EXPECT_EQ(norm.device_us, 0);
  EXPECT_EQ(rec.by_class[static_cast<size_t>(OpClass::kAttention)].device_us, 20);
  EXPECT_EQ(rec.total_flops(), 177);
  EXPECT_EQ(rec.ops.size(), 4u);
  EXPECT_TRUE(out.timing.ops.empty());  // moved, not copied
}

TEST(StepRecordBuildTest, ServingStateComesFromTheScheduler) {
  SchedulerConfig config;
  config.max_num_seqs = 1;
  config.max_num_batched_tokens = 64;
  config.max_model_len = 256;
  Scheduler sched(config, /*num_kv_blocks=*/8, /*block_size=*/16);
  GenerateRequest r;
  r.prompt = {5, 6, 7};
  r.sampling.max_tokens = 4;
  sched.Add(1, r);
  sched.Add(2, r);
  const StepPlan plan = sched.Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);

  StepRecord rec;
  RecordServingState(sched, &rec);
  EXPECT_EQ(rec.num_running, 1);
  EXPECT_EQ(rec.queue_depth, 1);
  EXPECT_EQ(rec.kv_blocks_used, 1);
  EXPECT_EQ(rec.kv_blocks_free, 7);
}

}  // namespace
}  // namespace saturn
