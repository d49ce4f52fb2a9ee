// The verdict on hand-built windows with known answers, one per class, plus the profile
// figures they rest on. No timing.
#include "engine/diag/analyzer.h"

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

using testing_diag::StepSpec;
using testing_diag::TrueModel;

DiagnosticsReport AnalyzeWindow(const std::vector<StepRecord>& steps, const AnalyzerContext& ctx,
                                double extra_idle_us = 0) {
  const double end = steps.empty() ? 1e6 : steps.back().end_us + extra_idle_us;
  return Analyze(steps, 0, end, testing_diag::TestCalibration(), ctx);
}

const Signal& Find(const Verdict& v, const std::string& name) {
  for (const Signal& s : v.signals) {
    if (s.name == name) return s;
  }
  static Signal none;
  ADD_FAILURE() << "no signal " << name;
  return none;
}

TEST(AnalyzerTest, SmallBatchOneDecodeIsMemoryBound) {
  StepSpec s;
  s.queue_depth = 3;  // requests wait: the server's max_num_seqs=1 sets the batch
  s.max_num_seqs = 1;
  const auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 10);
  const auto r = AnalyzeWindow(steps, testing_diag::TestContext(testing_diag::Small(), 1));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kMemoryBound) << r.verdict.summary;
  EXPECT_FALSE(Find(r.verdict, "compute_vs_memory_floor").crossed);
  EXPECT_FALSE(Find(r.verdict, "overhead_vs_roofline_floor").crossed);
  EXPECT_NEAR(r.profile.busy_fraction, 1.0, 0.01);
  EXPECT_GT(r.profile.mbu, 0.9);  // true model runs at the calibrated bandwidth
  EXPECT_LT(r.profile.mfu, 0.1);
  EXPECT_LT(r.profile.intensity, r.profile.ridge);
  EXPECT_NEAR(r.profile.mean_batch_seqs, 1, 1e-9);
  EXPECT_NEAR(r.profile.decode_tokens_per_s, 10 / r.profile.window_s, 1e-6);
}

TEST(AnalyzerTest, LargeDecodeBatchIsComputeBound) {
  StepSpec s;
  s.seqs = 64;
  const auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 5);
  const auto r = AnalyzeWindow(steps, testing_diag::TestContext(testing_diag::Small(), 64));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kComputeBound) << r.verdict.summary;
  EXPECT_TRUE(Find(r.verdict, "compute_vs_memory_floor").crossed);
  EXPECT_GT(r.profile.intensity, r.profile.ridge);
  EXPECT_TRUE(r.plan.actions.empty());
  EXPECT_FALSE(r.plan.note.empty());
}

TEST(AnalyzerTest, TinyModelWithBigOverheadIsLaunchBound) {
  TrueModel t;
  t.host_us = 40;
  StepSpec s;
  s.max_num_seqs = 1;
  auto ctx = testing_diag::TestContext(testing_diag::Micro(), 1);
  const auto steps = testing_diag::Steps(testing_diag::Micro(), t, s, 50);
  const auto r = AnalyzeWindow(steps, ctx);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kLaunchBound) << r.verdict.summary;
  const Signal& over = Find(r.verdict, "overhead_vs_roofline_floor");
  EXPECT_TRUE(over.crossed);
  EXPECT_GT(over.value, 2.0);
  EXPECT_TRUE(Find(r.verdict, "launch_share").crossed);
  EXPECT_GT(r.profile.launch_share, 0.2);
}

// The first H200 run, in miniature: `small` at batch 1, 126 kernels a step, each with a few
// us of fixed device latency. Eagerly every kernel is a launch (5 us each: the host cannot
// keep up); replayed as a graph the step pays one launch (8 us), so graphs on is not
// LAUNCH_BOUND, though the op count is the same (the H200 run said LAUNCH_BOUND for every
// graphs-on phase, charging op count x dispatch cost to replayed steps).
// An H200 as its first run calibrated it: 793 TFLOP/s, 4.2 TB/s, 5 us a kernel launch, 8 us a
// graph launch.
Calibration H200Calibration() {
  Calibration cal = testing_diag::TestCalibration();
  cal.backend = "cuda";
  cal.gemm_flops_per_s = 7.93e14;
  cal.bandwidth_bytes_per_s = 4.2e12;
  cal.op_dispatch_us = 5;
  cal.graph_launch_us = 8;
  return cal;
}

TEST(AnalyzerTest, GraphReplayPaysOneLaunchNotOnePerOp) {
  TrueModel t;
  t.host_us = 40;
  t.op_overhead_us = 4;
  t.bytes_per_us = 4.2e6;  // 4.2 TB/s
  t.flops_per_us = 7.9e8;
  const Calibration cal = H200Calibration();
  StepSpec s;
  s.queue_depth = 2;  // requests wait: demand is not what limits
  s.max_num_seqs = 1;
  AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 1);
  ctx.backend = "cuda";
  std::vector<StepRecord> eager = testing_diag::Steps(testing_diag::Small(), t, s, 50);
  // Eager launches: the host issues each op for as long as its dispatch takes, and the
  // device waits between kernels.
  double at = 0;
  for (StepRecord& r : eager) {
    const double wall = r.op_count * cal.op_dispatch_us + t.host_us;
    r.start_us = at;
    r.end_us = at + wall;
    r.device_span_us = r.op_count * cal.op_dispatch_us;
    at = r.end_us;
  }
  std::vector<StepRecord> graphs = testing_diag::Steps(testing_diag::Small(), t, s, 50);
  for (StepRecord& r : graphs) {
    r.graph_replayed = true;
    r.replayed_ops = r.op_count;
    r.per_op_timed = false;
  }
  const DiagnosticsReport e = Analyze(eager, 0, eager.back().end_us, cal, ctx);
  const DiagnosticsReport g = Analyze(graphs, 0, graphs.back().end_us, cal, ctx);
  EXPECT_EQ(e.verdict.bottleneck, Bottleneck::kLaunchBound) << e.verdict.summary;
  EXPECT_NE(g.verdict.step_bound, Bottleneck::kLaunchBound) << g.verdict.summary;
  EXPECT_NE(g.verdict.bottleneck, Bottleneck::kLaunchBound) << g.verdict.summary;
  EXPECT_FALSE(Find(g.verdict, "launch_share").crossed);
  // One launch of 8 us in a step of about 650 us.
  EXPECT_NEAR(g.profile.launch_share, 8.0 / (graphs[0].wall_us()), 1e-6);
  EXPECT_GT(e.profile.launch_share, 0.8);
}

// The first H200 run's small at c=64, graphs on, in miniature: one graph launch a step, the
// device idle a third of each step while the server schedules, prepares and posts tokens, and
// no request waiting (clients hold 64 in flight, max_num_seqs 128). HOST_BOUND, naming each
// host phase in us per step; the plan does not ask for more clients (each adds host work to
// every step) and says the change is in the server.
TEST(AnalyzerTest, HostPhasesWithTheDeviceIdleAreHostBound) {
  TrueModel t;
  t.host_us = 60;
  t.host_us_per_seq = 4;  // token events and scheduler update per sequence
  t.op_overhead_us = 1;
  t.bytes_per_us = 4.2e6;
  t.flops_per_us = 7.9e8;
  const Calibration cal = H200Calibration();
  StepSpec s;
  s.seqs = 64;
  s.max_num_seqs = 128;
  AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 128);
  ctx.backend = "cuda";
  ctx.supports_graphs = true;
  ctx.options.cuda_graphs = true;
  std::vector<StepRecord> steps = testing_diag::Steps(testing_diag::Small(), t, s, 50);
  for (StepRecord& r : steps) {
    r.graph_replayed = true;
    r.replayed_ops = r.op_count;
    r.per_op_timed = false;
    r.options.cuda_graphs = true;
  }
  const DiagnosticsReport r = Analyze(steps, 0, steps.back().end_us, cal, ctx);
  ASSERT_EQ(r.verdict.bottleneck, Bottleneck::kHostBound) << r.verdict.summary;
  EXPECT_EQ(r.verdict.step_bound, Bottleneck::kHostBound);
  EXPECT_STREQ(BottleneckName(r.verdict.bottleneck), "HOST_BOUND");
  const double host = t.host_us + t.host_us_per_seq * s.seqs;  // 316 us a step
  for (const std::string& part :
       {absl::StrFormat("host path takes %.0f us", host),
        absl::StrFormat("schedule %.1f", 0.2 * host), absl::StrFormat("prepare %.1f", 0.5 * host),
        std::string("op launches cost 8 us")}) {
    EXPECT_NE(r.verdict.summary.find(part), std::string::npos) << part << "\n" << r.verdict.summary;
  }
  for (const Action& a : r.plan.actions) {
    EXPECT_NE(a.kind, ActionKind::kRaiseClientConcurrency) << a.what;
  }
  if (r.plan.actions.empty()) {
    EXPECT_NE(r.plan.note.find("change is in the server"), std::string::npos) << r.plan.note;
  }
  // The largest phase here is prepare: the change named is overlapping it with the device.
  EXPECT_NE(r.verdict.summary.find("largest phase is prepare"), std::string::npos)
      << r.verdict.summary;
  EXPECT_NEAR(r.verdict.host_per_step.prepare_us, 0.5 * host, 1e-6);

  // Token events on the engine thread as the largest phase: the change named is the event
  // thread, and only where it is off.
  for (StepRecord& st : steps) std::swap(st.prepare_us, st.postprocess_us);
  const DiagnosticsReport off = Analyze(steps, 0, steps.back().end_us, cal, ctx);
  ASSERT_EQ(off.verdict.bottleneck, Bottleneck::kHostBound) << off.verdict.summary;
  EXPECT_NE(off.verdict.summary.find("--event_thread=on"), std::string::npos)
      << off.verdict.summary;
  EXPECT_NE(off.verdict.summary.find("token events (stream writes) on the engine thread"),
            std::string::npos)
      << off.verdict.summary;
  if (off.plan.actions.empty()) {
    EXPECT_NE(off.plan.note.find("--event_thread=on"), std::string::npos) << off.plan.note;
  }
  // Schedule as the largest phase: the overlapped loop is the change named, and once it hides
  // schedule and postprocess behind the device, neither counts as host time the device waited
  // for, and the change is no longer named.
  {
    std::vector<StepRecord> sched = steps;
    for (StepRecord& st : sched) std::swap(st.schedule_us, st.postprocess_us);
    const DiagnosticsReport before = Analyze(sched, 0, sched.back().end_us, cal, ctx);
    ASSERT_EQ(before.verdict.bottleneck, Bottleneck::kHostBound) << before.verdict.summary;
    EXPECT_NE(before.verdict.summary.find("--async_scheduling=on"), std::string::npos)
        << before.verdict.summary;
    EXPECT_FALSE(before.verdict.host_per_step.overlapped);
    for (StepRecord& st : sched) {
      st.hidden_host_us = std::min(st.schedule_us + st.postprocess_us, st.device_busy_us);
    }
    const DiagnosticsReport after = Analyze(sched, 0, sched.back().end_us, cal, ctx);
    EXPECT_TRUE(after.verdict.host_per_step.overlapped);
    EXPECT_LT(after.verdict.host_per_step.schedule_us,
              before.verdict.host_per_step.schedule_us * 0.75);
    EXPECT_NEAR(after.verdict.host_per_step.prepare_us, before.verdict.host_per_step.prepare_us,
                1e-9);
    EXPECT_LT(after.profile.host_share, before.profile.host_share);
    EXPECT_EQ(after.verdict.summary.find("--async_scheduling=on"), std::string::npos)
        << after.verdict.summary;
    // On a backend that runs ops as issued there is nothing to overlap with: not named.
    AnalyzerContext cpu = ctx;
    cpu.backend = "cpu";
    const DiagnosticsReport on_cpu = Analyze(sched, 0, sched.back().end_us, cal, cpu);
    EXPECT_EQ(on_cpu.verdict.summary.find("--async_scheduling=on"), std::string::npos)
        << on_cpu.verdict.summary;
  }
  ctx.event_thread = true;
  const DiagnosticsReport on = Analyze(steps, 0, steps.back().end_us, cal, ctx);
  ASSERT_EQ(on.verdict.bottleneck, Bottleneck::kHostBound) << on.verdict.summary;
  EXPECT_EQ(on.verdict.summary.find("--event_thread=on"), std::string::npos) << on.verdict.summary;
  EXPECT_NE(on.verdict.summary.find("waiting for the event thread"), std::string::npos)
      << on.verdict.summary;
  ctx.event_thread = false;

  // The same steps with the host path a tenth as long: the device is busy, not HOST_BOUND.
  t.host_us = 6;
  t.host_us_per_seq = 0.4;
  steps = testing_diag::Steps(testing_diag::Small(), t, s, 50);
  for (StepRecord& st : steps) st.graph_replayed = true, st.replayed_ops = st.op_count;
  const DiagnosticsReport q = Analyze(steps, 0, steps.back().end_us, cal, ctx);
  EXPECT_NE(q.verdict.bottleneck, Bottleneck::kHostBound) << q.verdict.summary;
}

// The step ring forgot the window's start (4096 steps last 2.9-5.7 s on an H200): the report
// says it covers less than was asked.
TEST(AnalyzerTest, AWindowCutShortByTheRingSaysSo) {
  StepSpec s;
  s.queue_depth = 1;
  s.max_num_seqs = 1;
  const auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 20);
  AnalyzerContext ctx = testing_diag::TestContext(testing_diag::Small(), 1);
  ctx.truncated_from_s = 8;
  ctx.ring_steps = 20;
  const DiagnosticsReport r =
      Analyze(steps, 0, steps.back().end_us, testing_diag::TestCalibration(), ctx);
  EXPECT_NE(r.verdict.window_note.find("of the 8.0 s asked"), std::string::npos)
      << r.verdict.window_note;
  EXPECT_NE(r.verdict.window_note.find("20 steps"), std::string::npos) << r.verdict.window_note;
}

TEST(AnalyzerTest, LaunchCostCountsEagerOpsAndOneLaunchPerReplay) {
  Calibration cal = testing_diag::TestCalibration();
  cal.op_dispatch_us = 5;
  cal.graph_launch_us = 8;
  StepRecord r;
  r.op_count = 130;
  EXPECT_DOUBLE_EQ(LaunchUs(r, cal), 650);
  r.replayed_ops = 126;  // 4 ops issued one by one around one replay
  EXPECT_DOUBLE_EQ(LaunchUs(r, cal), 4 * 5 + 8);
  cal.graph_launch_us = 0;  // a calibration from before graph launches were measured
  EXPECT_DOUBLE_EQ(LaunchUs(r, cal), 4 * 5 + 5);
}

// Other processes held the cores: every step of a launch-bound window took 12x as long, its
// threads waiting for a core 11/12 of the time they were runnable (schedstat). The calibrated
// dispatch cost is judged on the time they ran, so the class stands, and the verdict says
// the machine was contended.
TEST(AnalyzerTest, ContentionDoesNotHideALaunchBoundWindow) {
  TrueModel t;
  t.host_us = 0;  // only the launch share can say launch-bound
  StepSpec s;
  s.max_num_seqs = 1;
  const auto ctx = testing_diag::TestContext(testing_diag::Micro(), 1);
  const auto quiet = testing_diag::Steps(testing_diag::Micro(), t, s, 50);
  constexpr double kSlow = 12;
  std::vector<StepRecord> slow = quiet, measured;
  double at = 0;
  for (StepRecord& r : slow) {
    const double wall = r.wall_us();
    r.start_us = at;
    r.end_us = at + kSlow * wall;
    r.device_busy_us *= kSlow;
    r.device_span_us *= kSlow;
    r.issue_us *= kSlow;
    for (OpClassStats& c : r.by_class) c.device_us *= kSlow;
    at = r.end_us;
    StepRecord m = r;
    m.sched_known = true;
    m.sched_run_us = 2 * wall;  // two threads, each on a core for the quiet step's time
    m.sched_wait_us = 2 * (kSlow - 1) * wall;
    measured.push_back(m);
  }
  const auto q = AnalyzeWindow(quiet, ctx);
  ASSERT_EQ(q.verdict.bottleneck, Bottleneck::kLaunchBound) << q.verdict.summary;
  EXPECT_EQ(q.verdict.run_share, 1);
  for (const Signal& sig : q.verdict.signals) EXPECT_NE(sig.name, "cpu_run_share");

  // Without the steps' scheduler counters the contended window's launch share is 12x smaller.
  const auto blind = AnalyzeWindow(slow, ctx);
  const double blind_share = Find(blind.verdict, "launch_share").value;
  EXPECT_NEAR(blind_share * kSlow, Find(q.verdict, "launch_share").value, 1e-6);

  const auto r = AnalyzeWindow(measured, ctx);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kLaunchBound) << r.verdict.summary;
  EXPECT_NEAR(r.verdict.run_share, 1 / kSlow, 1e-9);
  EXPECT_NEAR(Find(r.verdict, "launch_share").value, blind_share * kSlow, 1e-6);
  EXPECT_TRUE(Find(r.verdict, "cpu_run_share").crossed);
  EXPECT_NE(r.verdict.summary.find("contended"), std::string::npos) << r.verdict.summary;
}

TEST(AnalyzerTest, IdleServerIsUnderloaded) {
  StepSpec s;  // each request arrives after a pause and is served in one prefill step
  s.running = 1;
  s.prefill_tokens = 8;
  // Steps take ~40 ms; 200 ms of nothing between them.
  const auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 5, 200000);
  const auto r = AnalyzeWindow(steps, testing_diag::TestContext(testing_diag::Small(), 1));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kUnderloaded) << r.verdict.summary;
  EXPECT_EQ(r.verdict.step_bound, Bottleneck::kMemoryBound);
  EXPECT_TRUE(Find(r.verdict, "engine_idle_share").crossed);
  EXPECT_GT(r.profile.idle_share, 0.7);
  EXPECT_LT(r.profile.busy_fraction, 0.3);
}

TEST(AnalyzerTest, EmptyQueueAndSmallBatchIsUnderloaded) {
  StepSpec s;
  s.seqs = 2;
  s.max_num_seqs = 64;
  const auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 10);
  const auto r = AnalyzeWindow(steps, testing_diag::TestContext(testing_diag::Small(), 64));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kUnderloaded) << r.verdict.summary;
  EXPECT_FALSE(Find(r.verdict, "engine_idle_share").crossed);
  EXPECT_TRUE(Find(r.verdict, "batch_fill").crossed);
  EXPECT_TRUE(Find(r.verdict, "max_waiting_requests").crossed);
}

TEST(AnalyzerTest, NoStepsIsUnderloaded) {
  const auto r = AnalyzeWindow({}, testing_diag::TestContext(testing_diag::Small(), 4));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kUnderloaded);
  EXPECT_DOUBLE_EQ(r.profile.idle_share, 1.0);
}

TEST(AnalyzerTest, PerClassBreakdownSumsToOne) {
  const auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, StepSpec{}, 4);
  const auto r = AnalyzeWindow(steps, testing_diag::TestContext(testing_diag::Small(), 1));
  double share = 0;
  for (const ClassProfile& c : r.profile.classes) share += c.time_share;
  EXPECT_NEAR(share, 1.0, 1e-9);
  ASSERT_FALSE(r.profile.classes.empty());
  EXPECT_EQ(r.profile.classes[0].op_class, OpClass::kGemm);
  EXPECT_GT(r.profile.classes[0].time_share, 0.9);
  EXPECT_FALSE(r.profile.classes[0].compute_side);
}

TEST(AnalyzerTest, GraphHitRateAndPadding) {
  StepSpec s;
  s.seqs = 3;
  auto steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 4);
  for (size_t i = 0; i < 2; ++i) {
    steps[i].graph_replayed = true;
    steps[i].padding_tokens = 1;  // 3 -> 4
  }
  const auto r = AnalyzeWindow(steps, testing_diag::TestContext(testing_diag::Small(), 3));
  EXPECT_DOUBLE_EQ(r.profile.graph_hit_rate, 0.5);
  EXPECT_DOUBLE_EQ(r.profile.padding_waste, 0.25);
}

}  // namespace
}  // namespace saturn
