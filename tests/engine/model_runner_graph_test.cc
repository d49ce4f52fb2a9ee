// The runner's graph path on the host, through a backend that captures like CUDA does (ops
// issued during a capture are recorded, not run; a replay runs them and appends their records)
// on top of the CPU backend, and logs every call. Checks what the CUDA backend relies on:
// one eager forward per size before its capture, nothing allocated/uploaded/downloaded/
// synchronised inside a capture, a failed capture aborted rather than instantiated, the
// step-end mark after the last op and before the copy back, a replay's issue time counted
// once, replayed steps (padding rows included) giving the eager tokens and the eager step's
// attention costs, and one packed upload per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/block_manager.h"
#include "engine/measure/step_probe_run.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/model_runner.h"
#include "tests/engine/capturing_backend.h"
#include "tests/engine/runner_test_util.h"

namespace saturn {
namespace {

using testing_runner::CapturingBackend;

class GraphCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = testing_runner::TinyWeights(3, 128);
    ASSERT_FALSE(HasFailure());
    auto cpu = CreateBackend("cpu", 1, "f32");
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    backend_ = std::make_unique<CapturingBackend>(std::move(*cpu));
  }
  std::unique_ptr<ModelRunner> MakeRunner(std::vector<int> graph_sizes) {
    const RunnerConfig rc = testing_runner::SmallRunnerConfig(64, std::move(graph_sizes));
    auto r = ModelRunner::Create(backend_.get(), weights_, rc);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  // Index of the first log entry at or after `from` equal to `what` (log size if none).
  size_t Find(const std::string& what, size_t from = 0) const {
    const auto& l = backend_->log;
    return std::find(l.begin() + from, l.end(), what) - l.begin();
  }

  ModelWeights weights_;
  std::unique_ptr<CapturingBackend> backend_;
};

TEST_F(GraphCaptureTest, EachSizeRunsEagerlyOnceBeforeItsCaptureAndCaptureIsPure) {
  auto runner = MakeRunner({1, 2, 4});
  ASSERT_NE(runner, nullptr);
  backend_->log.clear();
  ASSERT_TRUE(runner->CaptureGraphs().ok());
  EXPECT_EQ(backend_->num_graphs(), 3u);
  EXPECT_EQ(runner->graph_info().sizes, (std::vector<int>{1, 2, 4}));
  const auto& log = backend_->log;
  size_t prev_end = 0;
  for (int size = 0; size < 3; ++size) {
    const size_t begin = Find("begin_capture", prev_end);
    const size_t end = Find("end_capture", begin);
    ASSERT_LT(end, log.size()) << "capture " << size;
    // Before the capture: an eager forward through Sample, its end mark and a sync.
    const size_t eager_sample = Find("op:sample", prev_end);
    EXPECT_LT(eager_sample, begin) << "no eager forward before capture " << size;
    EXPECT_LT(Find("mark_step_end", eager_sample), begin);
    EXPECT_LT(Find("synchronize", eager_sample), begin);
    // Inside: ops only (recorded, never run), through Sample; no host round trip.
    size_t captured = 0;
    for (size_t i = begin + 1; i < end; ++i) {
      EXPECT_EQ(log[i].rfind("captured:", 0), 0u) << log[i] << " inside capture " << size;
      ++captured;
    }
    EXPECT_EQ(log[end - 1], "captured:sample");
    EXPECT_GT(captured, 10u);
    prev_end = end;
  }
  EXPECT_EQ(Find("abort_capture"), log.size());
}

TEST_F(GraphCaptureTest, AFailedCaptureIsAbortedNotInstantiated) {
  auto runner = MakeRunner({2, 4});
  ASSERT_NE(runner, nullptr);
  backend_->fail_in_capture = "attention";
  backend_->log.clear();
  absl::Status s = runner->SetUseGraphs(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("injected capture failure"), std::string::npos) << s;
  EXPECT_LT(Find("abort_capture"), backend_->log.size());
  EXPECT_EQ(Find("end_capture"), backend_->log.size());  // nothing instantiated
  EXPECT_EQ(backend_->num_graphs(), 0u);
  EXPECT_FALSE(runner->use_graphs());
  EXPECT_TRUE(runner->graph_info().sizes.empty());
  // The runner still serves eagerly, and a later capture (now succeeding) works.
  backend_->fail_in_capture.clear();
  ASSERT_TRUE(runner->SetUseGraphs(true).ok());
  EXPECT_EQ(backend_->num_graphs(), 2u);
}

// A prompt for each of `n` sequences, then decode steps; returns the tokens of the last step
// (and, where `logprobs`, each decode token's logprob, which such steps compute eagerly).
struct DecodeRun {
  std::vector<int> tokens;
  std::vector<float> logprobs;
  RunnerOutput last;
};
DecodeRun Decode(ModelRunner* runner, int n, int steps, CapturingBackend* log_owner,
                 bool logprobs = false) {
  BlockManager blocks(64, 4);
  std::vector<ScheduledSeq> seqs(n);
  StepPlan prefill;
  for (int i = 0; i < n; ++i) {
    ScheduledSeq& s = seqs[i];
    s.request_id = i;
    for (int j = 0; j < 5 + 3 * i; ++j) s.token_ids.push_back((i * 31 + j * 7) % 256);
    EXPECT_TRUE(blocks.EnsureCapacity(&s.block_table, 5 + 3 * i + steps + 1));
    s.sample = true;
    s.is_prefill = true;
    s.sampling.logprobs = logprobs ? 0 : -1;
    prefill.seqs.push_back(s);
  }
  auto out = runner->Execute(prefill, false);
  EXPECT_TRUE(out.ok()) << out.status();
  DecodeRun run;
  if (!out.ok()) return run;
  std::vector<int> next = out->sampled;
  for (int step = 0; step < steps; ++step) {
    StepPlan plan;
    for (int i = 0; i < n; ++i) {
      ScheduledSeq& s = seqs[i];
      s.start_position += s.num_new_tokens();
      s.token_ids = {next[i]};
      s.is_prefill = false;
      s.sample_step = step + 1;
      plan.seqs.push_back(s);
    }
    log_owner->log.clear();
    auto o = runner->Execute(plan, false);
    EXPECT_TRUE(o.ok()) << o.status();
    if (!o.ok()) return run;
    next = o->sampled;
    run.tokens.insert(run.tokens.end(), next.begin(), next.end());
    for (const SeqLogprobs& l : o->logprobs) {
      for (const PositionLogprobs& p : l.sampled) run.logprobs.push_back(p.token.logprob);
    }
    run.last = *o;
  }
  return run;
}

TEST_F(GraphCaptureTest, ReplayedDecodeGivesTheEagerTokensAndCountsIssueOnce) {
  auto eager = MakeRunner({});
  ASSERT_NE(eager, nullptr);
  const DecodeRun want = Decode(eager.get(), 3, 4, backend_.get());
  auto graphs = MakeRunner({1, 4});  // 3 sequences replay the size-4 graph with one pad row
  ASSERT_NE(graphs, nullptr);
  ASSERT_TRUE(graphs->SetUseGraphs(true).ok());
  const DecodeRun got = Decode(graphs.get(), 3, 4, backend_.get());
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_TRUE(got.last.graph_replayed);
  EXPECT_EQ(got.last.graph_batch_size, 4);
  EXPECT_EQ(got.last.padding_tokens, 1);
  // The replay's host interval belongs to its first op; the step counts it once.
  const StepTiming& t = got.last.timing;
  ASSERT_GT(t.ops.size(), 10u);
  EXPECT_EQ(t.replayed_ops, static_cast<int>(t.ops.size()));  // the diagnostics' one launch
  EXPECT_EQ(want.last.timing.replayed_ops, 0);
  EXPECT_NEAR(t.issue_us, t.ops[0].issue_end_us - t.ops[0].issue_begin_us, 1e-9);
  for (size_t i = 1; i < t.ops.size(); ++i) {
    EXPECT_EQ(t.ops[i].issue_end_us, t.ops[i].issue_begin_us) << "op " << i;
  }
  EXPECT_EQ(t.ops.back().kind, OpKind::kSample);
  // The step end is marked after the replay and before the tokens come back.
  const size_t replay = Find("replay"), mark = Find("mark_step_end"), down = Find("download_async");
  EXPECT_LT(replay, mark);
  EXPECT_LT(mark, down);
  EXPECT_LT(down, backend_->log.size());
}

TEST_F(GraphCaptureTest, ReplayedAttentionCostsWhatTheEagerStepDoes) {
  // The captured records carry the capture-time batch (4 padded rows); the runner restates
  // attention from the replayed step's own shapes: its 3 real rows over their contexts.
  auto eager = MakeRunner({});
  ASSERT_NE(eager, nullptr);
  const DecodeRun want = Decode(eager.get(), 3, 2, backend_.get());
  auto graphs = MakeRunner({4});
  ASSERT_NE(graphs, nullptr);
  ASSERT_TRUE(graphs->SetUseGraphs(true).ok());
  const DecodeRun got = Decode(graphs.get(), 3, 2, backend_.get());
  ASSERT_TRUE(got.last.graph_replayed);
  ASSERT_FALSE(want.last.graph_replayed);
  std::vector<OpCost> want_costs, got_costs;
  for (const OpRecord& op : want.last.timing.ops) {
    if (op.kind == OpKind::kAttention) want_costs.push_back(op.cost);
  }
  for (const OpRecord& op : got.last.timing.ops) {
    if (op.kind == OpKind::kAttention) got_costs.push_back(op.cost);
  }
  ASSERT_FALSE(want_costs.empty());
  ASSERT_EQ(got_costs.size(), want_costs.size());
  for (size_t i = 0; i < want_costs.size(); ++i) {
    EXPECT_DOUBLE_EQ(got_costs[i].flops, want_costs[i].flops) << "layer " << i;
    EXPECT_DOUBLE_EQ(got_costs[i].bytes, want_costs[i].bytes) << "layer " << i;
  }
}

// A step's ops of one kind: how many, and the first (which must exist).
int CountOps(const StepTiming& t, OpKind kind) {
  return static_cast<int>(std::count_if(t.ops.begin(), t.ops.end(),
                                        [kind](const OpRecord& op) { return op.kind == kind; }));
}
const OpRecord& FirstOp(const StepTiming& t, OpKind kind) {
  return *std::find_if(t.ops.begin(), t.ops.end(),
                       [kind](const OpRecord& op) { return op.kind == kind; });
}

// Where the backend fuses rope and the KV write (CUDA fused kernels), the runner issues one
// rope_kv_write op per layer in their place, costed as one pass, and the tokens and logprobs
// stay the same (the tokens replayed too).
TEST_F(GraphCaptureTest, AFusedRopeKvWriteIsOneOpPerLayerAndKeepsTheTokens) {
  auto unfused_runner = MakeRunner({});
  ASSERT_NE(unfused_runner, nullptr);
  const DecodeRun unfused = Decode(unfused_runner.get(), 3, 3, backend_.get(), true);
  ASSERT_EQ(unfused.logprobs.size(), 9u);
  const int layers = weights_.config.num_layers;
  ASSERT_EQ(CountOps(unfused.last.timing, OpKind::kRope), layers);
  ASSERT_EQ(CountOps(unfused.last.timing, OpKind::kKvWrite), layers);
  EXPECT_EQ(CountOps(unfused.last.timing, OpKind::kRopeKvWrite), 0);

  backend_->fuse_rope_kv_write = true;
  auto eager = MakeRunner({});
  ASSERT_NE(eager, nullptr);
  const DecodeRun fused = Decode(eager.get(), 3, 3, backend_.get(), true);
  EXPECT_EQ(fused.tokens, unfused.tokens);
  EXPECT_EQ(fused.logprobs, unfused.logprobs);  // the same arithmetic, to the bit
  const StepTiming& t = fused.last.timing;
  EXPECT_EQ(CountOps(t, OpKind::kRopeKvWrite), layers);
  EXPECT_EQ(CountOps(t, OpKind::kRope), 0);
  EXPECT_EQ(CountOps(t, OpKind::kKvWrite), 0);
  EXPECT_EQ(t.ops.size() + layers, unfused.last.timing.ops.size());
  EXPECT_EQ(std::count(backend_->log.begin(), backend_->log.end(), "op:rope_kv_write"), layers);
  // One pass: the rotation's FLOPs, and fewer bytes than rope's read-write of k plus the copy.
  const OpRecord& f = FirstOp(t, OpKind::kRopeKvWrite);
  const OpRecord& r = FirstOp(unfused.last.timing, OpKind::kRope);
  const OpRecord& w = FirstOp(unfused.last.timing, OpKind::kKvWrite);
  EXPECT_DOUBLE_EQ(f.cost.flops, r.cost.flops);
  EXPECT_LT(f.cost.bytes, r.cost.bytes + w.cost.bytes);
  EXPECT_GT(f.cost.bytes, w.cost.bytes);

  auto graphs = MakeRunner({4});
  ASSERT_NE(graphs, nullptr);
  ASSERT_TRUE(graphs->SetUseGraphs(true).ok());
  const DecodeRun replayed = Decode(graphs.get(), 3, 3, backend_.get());
  ASSERT_TRUE(replayed.last.graph_replayed);
  EXPECT_EQ(replayed.tokens, unfused.tokens);
  EXPECT_EQ(CountOps(replayed.last.timing, OpKind::kRopeKvWrite), layers);
}

// Where the backend fuses SwiGLU into the GEMM at few rows (CUDA's fused skinny kernel), decode
// steps issue one gemm_swiglu op per layer, a GEMM by class, with the same tokens and logprobs
// (replayed too); steps past the row limit keep the GEMM and SwiGLU apart.
TEST_F(GraphCaptureTest, AFusedGemmSwiGluRunsAtFewRowsAndKeepsTheTokens) {
  EXPECT_EQ(ClassOf(OpKind::kGemmSwiGlu), OpClass::kGemm);
  auto unfused_runner = MakeRunner({});
  ASSERT_NE(unfused_runner, nullptr);
  const DecodeRun unfused = Decode(unfused_runner.get(), 3, 3, backend_.get(), true);
  const int layers = weights_.config.num_layers;
  ASSERT_EQ(CountOps(unfused.last.timing, OpKind::kSwiGlu), layers);

  backend_->fuse_gemm_swiglu_max_rows = 16;
  auto eager = MakeRunner({});
  ASSERT_NE(eager, nullptr);
  const DecodeRun fused = Decode(eager.get(), 3, 3, backend_.get(), true);
  EXPECT_EQ(fused.tokens, unfused.tokens);
  EXPECT_EQ(fused.logprobs, unfused.logprobs);
  const StepTiming& t = fused.last.timing;
  EXPECT_EQ(CountOps(t, OpKind::kGemmSwiGlu), layers);
  EXPECT_EQ(CountOps(t, OpKind::kSwiGlu), 0);
  EXPECT_EQ(t.ops.size() + layers, unfused.last.timing.ops.size());
  // The fused op does the GEMM's and SwiGLU's FLOPs and moves less than the two apart.
  auto totals = [](const StepTiming& st) {
    OpCost sum;
    for (const OpRecord& op : st.ops) sum.flops += op.cost.flops, sum.bytes += op.cost.bytes;
    return sum;
  };
  EXPECT_DOUBLE_EQ(totals(t).flops, totals(unfused.last.timing).flops);
  EXPECT_LT(totals(t).bytes, totals(unfused.last.timing).bytes);

  // Past the backend's row limit (3 decode rows against 2) the GEMM and SwiGLU stay apart.
  backend_->fuse_gemm_swiglu_max_rows = 2;
  (void)Decode(eager.get(), 3, 1, backend_.get());
  EXPECT_EQ(std::count(backend_->log.begin(), backend_->log.end(), "op:swiglu"), layers);
  EXPECT_EQ(std::count(backend_->log.begin(), backend_->log.end(), "op:gemm_swiglu"), 0);

  auto graphs = MakeRunner({4});
  ASSERT_NE(graphs, nullptr);
  backend_->fuse_gemm_swiglu_max_rows = 16;
  ASSERT_TRUE(graphs->SetUseGraphs(true).ok());
  const DecodeRun replayed = Decode(graphs.get(), 3, 3, backend_.get());
  ASSERT_TRUE(replayed.last.graph_replayed);
  EXPECT_EQ(replayed.tokens, unfused.tokens);
  EXPECT_EQ(CountOps(replayed.last.timing, OpKind::kGemmSwiGlu), layers);
}

// The fused op checks what Rope and KvWrite check, and names itself.
TEST_F(GraphCaptureTest, AFusedRopeKvWriteNamesItselfInShapeErrors) {
  backend_->fuse_rope_kv_write = true;
  auto buf = backend_->Allocate(1 << 16);
  ASSERT_TRUE(buf.ok()) << buf.status();
  const Tensor q = buf->View(DType::kF32, 2, 64), k = buf->View(DType::kF32, 2, 32),
               cache = buf->View(DType::kF32, 8, 32), pos = buf->View(DType::kI32, 1, 2),
               bad_slots = buf->View(DType::kI32, 1, 3);
  backend_->BeginStep(false);
  const absl::Status s =
      backend_->RopeKvWrite(q, k, k, pos, 16, RopeParams{}, bad_slots, cache, cache);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("rope_kv_write"), std::string::npos) << s;
  EXPECT_NE(s.message().find("slot_mapping"), std::string::npos) << s;
  const absl::Status odd = backend_->RopeKvWrite(q, k, k, pos, 15, RopeParams{}, pos, cache, cache);
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument) << odd;
  EXPECT_NE(odd.message().find("head_dim"), std::string::npos) << odd;
  EXPECT_EQ(std::count(backend_->log.begin(), backend_->log.end(), "op:rope_kv_write"), 0);
}

TEST_F(GraphCaptureTest, EagerStepMarksItsEndAfterSampleBeforeTheDownload) {
  auto runner = MakeRunner({});
  ASSERT_NE(runner, nullptr);
  (void)Decode(runner.get(), 2, 1, backend_.get());
  const auto& log = backend_->log;
  const size_t mark = Find("mark_step_end"), down = Find("download_async");
  ASSERT_LT(mark, log.size());
  ASSERT_GT(mark, 0u);
  EXPECT_EQ(log[mark - 1], "op:sample");
  EXPECT_LT(mark, down);
  EXPECT_LT(down, Find("end_step"));
  // The step's inputs go up packed in one copy, its tokens come back in one.
  EXPECT_EQ(std::count(log.begin(), log.end(), "upload"), 1);
  EXPECT_EQ(std::count(log.begin(), log.end(), "download_async"), 1);
}

}  // namespace
}  // namespace saturn

namespace saturn {
namespace {

// Decode batches 1 .. max_batch at context 8, `repeats` steps each, no prefill.
StepProbeOptions DecodeOnlyProbe(int max_batch, int repeats) {
  StepProbeOptions o;
  o.max_batch = max_batch;
  o.max_prefill_tokens = 0;
  o.context = 8;
  o.repeats = repeats;
  o.budget_ms = 60000;
  return o;
}

// The step probe on a backend that captures graphs times its decode batches with the other
// graph setting too (StepProbe::other_graphs: replays, here, while graphs are off), gives the
// runner its own setting back and every KV block back; on the CPU backend (no graphs) it
// times one setting only.
TEST_F(GraphCaptureTest, TheProbeTimesBothGraphSettingsWhereTheBackendCaptures) {
  auto runner = MakeRunner({1, 2, 4});
  ASSERT_NE(runner, nullptr);
  BlockManager blocks(64, 4);
  StepProbeOptions o = DecodeOnlyProbe(4, 2);
  ASSERT_FALSE(runner->use_graphs());
  absl::StatusOr<StepProbe> p = RunStepProbe(runner.get(), &blocks, 64, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->graphs);
  EXPECT_FALSE(runner->use_graphs());  // restored
  EXPECT_EQ(blocks.num_free(), 64);
  std::vector<int> own, other;
  for (const ProbeSeries& s : p->series) {
    if (!s.prefill && !s.after_prefill && s.context == p->decode_context) own.push_back(s.rows);
  }
  for (const ProbeSeries& s : p->other_graphs) {
    EXPECT_FALSE(s.prefill);
    EXPECT_EQ(s.context, p->decode_context);
    EXPECT_EQ(s.wall_us.size(), 2u);
    other.push_back(s.rows);
  }
  EXPECT_EQ(own, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(other, own);
  EXPECT_EQ(backend_->num_graphs(), 3u);  // captured for the probe, kept
  // Off: one setting.
  o.both_graph_modes = false;
  p = RunStepProbe(runner.get(), &blocks, 64, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->other_graphs.empty());
}

TEST(StepProbeGraphs, TheCpuBackendTimesOneSetting) {
  ModelWeights w = testing_runner::TinyWeights(3, 128);
  auto cpu = CreateBackend("cpu", 1, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const RunnerConfig rc = testing_runner::SmallRunnerConfig(64);
  auto runner = ModelRunner::Create(cpu->get(), w, rc);
  ASSERT_TRUE(runner.ok()) << runner.status();
  BlockManager blocks(64, 4);
  absl::StatusOr<StepProbe> p = RunStepProbe(runner->get(), &blocks, 64, DecodeOnlyProbe(2, 1));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->series.empty());
  EXPECT_TRUE(p->other_graphs.empty());
}

}  // namespace
}  // namespace saturn
