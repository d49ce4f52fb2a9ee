// Real workloads on the CPU backend through the in-process Engine, diagnosed correctly:
//   a micro checkpoint at batch 1            -> LAUNCH_BOUND or HOST_BOUND
//   `small` at batch 1 decode                -> MEMORY_BOUND
//   `small` at decode batch 64               -> COMPUTE_BOUND
//   a trickle-fed server / an idle one       -> UNDERLOADED
//   the same classes calibrated and measured while two busy processes hold the cores (and
//   the steps' own scheduler counters saying so)
// and the plan's prediction for raising max_num_seqs, checked by the PlanTracker (printed;
// asserted only loosely, the bench reports the error). Decisions rest on ratios with wide
// margins, so a loaded 2-core machine still gets them right.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "engine/diag/analyzer.h"
#include "engine/diag/engine_context.h"
#include "engine/diag/plan_tracker.h"
#include "engine/engine.h"
#include "engine/model/weights.h"
#include "proto/render/report_json.h"
#include "proto/render/report_proto.h"
#include "proto/render/report_text.h"
#include "tests/engine/diag/busy.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

namespace fs = std::filesystem;

GenerateRequest Req(int prompt_len, int max_tokens, int salt) {
  GenerateRequest r;
  for (int j = 0; j < prompt_len; ++j) r.prompt.push_back(3 + (salt * 31 + j * 7) % 250);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// Runs `n` requests at once and waits for all; returns the window [first step, last step].
std::vector<StepRecord> RunConcurrent(Engine* e, int n, int prompt_len, int max_tokens) {
  const double t0 = NowUs();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) {
    auto s = RequestStream::Open(e, Req(prompt_len, max_tokens, i));
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) streams.push_back(std::move(*s));
  }
  for (auto& s : streams) s->Drain(nullptr);
  return e->steps().Since(t0);
}

DiagnosticsReport Diagnose(const Engine& e, const Calibration& cal,
                           const std::vector<StepRecord>& steps, double begin = -1,
                           double end = -1) {
  if (begin < 0) begin = steps.front().start_us;
  if (end < 0) end = steps.back().end_us;
  DiagnosticsReport r = Analyze(steps, begin, end, cal, ContextFromEngine(e));
  std::printf("%s\n", RenderReport(ToProto(r)).c_str());
  if (getenv("SATURN_DIAG_JSON")) std::printf("%s\n", ReportJson(ToProto(r), true).c_str());
  return r;
}

std::unique_ptr<Engine> MakeEngine(const std::string& model, int limit, int max_len) {
  EngineConfig cfg;
  cfg.model = model;
  cfg.backend = "cpu";
  cfg.max_model_len = max_len;
  cfg.max_num_seqs_limit = limit;
  cfg.options.max_num_seqs = limit;
  cfg.max_num_batched_tokens_limit = 2048;
  cfg.options.max_num_batched_tokens = 2048;
  auto e = Engine::Create(cfg);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

Calibration Calibrated(Engine* e) {
  auto cal = e->Calibrate();
  EXPECT_TRUE(cal.ok()) << cal.status();
  std::printf("calibration: %.1f GFLOP/s, %.1f GB/s, %.2f us/op\n", cal->gemm_flops_per_s / 1e9,
              cal->bandwidth_bytes_per_s / 1e9, cal->op_dispatch_us);
  return *cal;
}

void SetMaxNumSeqs(Engine* e, int n) {
  EngineOptions o = e->options();
  o.max_num_seqs = n;
  ASSERT_TRUE(e->UpdateOptions(o).ok());
}

class MicroWorkload : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("saturn_micro_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    auto w = RandomWeights(testing_diag::Micro(), 7);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(SaveHfCheckpoint(*w, dir_->string()).ok());
    engine_ = MakeEngine(dir_->string(), 8, 256).release();
    ASSERT_NE(engine_, nullptr);
    cal_ = new Calibration(Calibrated(engine_));
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete cal_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
  static Engine* engine_;
  static Calibration* cal_;
};
fs::path* MicroWorkload::dir_ = nullptr;
Engine* MicroWorkload::engine_ = nullptr;
Calibration* MicroWorkload::cal_ = nullptr;

TEST_F(MicroWorkload, BatchOneIsLaunchBound) {
  SetMaxNumSeqs(engine_, 1);
  const auto steps = RunConcurrent(engine_, 4, 8, 200);  // one runs, three wait
  ASSERT_GT(steps.size(), 400u);
  const auto r = Diagnose(*engine_, *cal_, steps);
  // The device waits on the host: launches, or (where they cost under 10 % of the step, as
  // the CPU pool's hand-offs often do) the server's own host path. Where the engine's threads
  // had a core under half their runnable time (5 % was seen in CI, beside the spinners of
  // BatchOneIsLaunchBoundUnderLoad under ctest -j2), a roofline verdict that lays the gap on
  // the contention is the right one, as in that test.
  const bool host_side = r.verdict.bottleneck == Bottleneck::kLaunchBound ||
                         r.verdict.bottleneck == Bottleneck::kHostBound;
  const bool blames_cores =
      r.verdict.summary.find("other processes held the cores") != std::string::npos;
  EXPECT_TRUE(host_side || (r.verdict.run_share < 0.5 && blames_cores)) << r.verdict.summary;
  // No graphs on the CPU backend: the plan never offers them.
  for (const Action& a : r.plan.actions) EXPECT_NE(a.kind, ActionKind::kEnableCudaGraphs);
}

// Calibrated and run while two other processes spin on the machine's cores: the ceilings
// must not collapse (contention-corrected trials), and no figure may pass 100 % unflagged.
void ExpectHonest(const DiagnosticsReport& r) {
  const bool over = r.profile.mfu > 1.0 || r.profile.mbu > 1.0;
  EXPECT_TRUE(!over || r.verdict.calibration_check.suspect) << RenderReport(ToProto(r));
}

TEST_F(MicroWorkload, BatchOneIsLaunchBoundUnderLoad) {
  testing_diag::BusyProcesses busy(2);
  ASSERT_EQ(busy.count(), 2);
  const Calibration cal = Calibrated(engine_);
  SetMaxNumSeqs(engine_, 1);
  const auto steps = RunConcurrent(engine_, 4, 8, 200);
  ASSERT_GT(steps.size(), 400u);
  const auto r = Diagnose(*engine_, cal, steps);
  ExpectHonest(r);
  // Every step counted its threads' time on and off a core (Linux schedstat), and the verdict
  // reports the share they had a core and says other processes held the cores exactly when
  // it is under the threshold. How much the two spinners take is the kernel scheduler's
  // business: a batch-1 engine that sleeps between steps is often let back at once on wake-up
  // (a run share of 1.0 was seen with two spinners on two cores), so the share itself is not
  // asserted here; the analyzer tests assert the contended wording on set counters.
  double run = 0, wait = 0;
  for (const StepRecord& s : steps) {
    EXPECT_TRUE(s.sched_known);
    run += s.sched_run_us;
    wait += s.sched_wait_us;
  }
  ASSERT_GT(run, 0);
  const double share = std::clamp(run / (run + wait), 0.05, 1.0);
  EXPECT_NEAR(r.verdict.run_share, share, 0.01);
  const bool contended = share < AnalyzerThresholds().contended_run_share;
  const bool blames_cores =
      r.verdict.summary.find("other processes held the cores") != std::string::npos;
  EXPECT_EQ(blames_cores, contended) << "run share " << share << ": " << r.verdict.summary;
  // The device waits on the host (launches or the host path). Where the threads had a core
  // under half their runnable time (6 % was seen under ctest -j2 beside the spinners), each
  // step's own work grows with the waits, launches fall under their share, and a roofline
  // verdict that lays the gap on the contention is the right one.
  const bool host_side = r.verdict.bottleneck == Bottleneck::kLaunchBound ||
                         r.verdict.bottleneck == Bottleneck::kHostBound;
  EXPECT_TRUE(host_side || (share < 0.5 && blames_cores))
      << "run share " << share << ": " << r.verdict.summary;
  std::printf("under two spinners: the engine's threads had a core %.0f%% of their runnable time\n",
              100 * share);
}

TEST_F(MicroWorkload, TrickleFedIsUnderloaded) {
  SetMaxNumSeqs(engine_, 8);
  const double t0 = NowUs();
  for (int i = 0; i < 4; ++i) {
    auto s = RequestStream::Open(engine_, Req(8, 4, i));
    ASSERT_TRUE(s.ok());
    (*s)->Drain(nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double t1 = NowUs();
  const auto r = Diagnose(*engine_, *cal_, engine_->steps().Since(t0), t0, t1);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kUnderloaded) << r.verdict.summary;
  EXPECT_GT(r.profile.idle_share, 0.6);
  // More clients, whatever else the plan adds after it (quantize_weights, last, where the
  // steps it measured were memory-bound).
  const auto& actions = r.plan.actions;
  EXPECT_TRUE(std::any_of(actions.begin(), actions.end(), [](const Action& a) {
    return a.kind == ActionKind::kRaiseClientConcurrency;
  })) << r.plan.note;
}

TEST_F(MicroWorkload, IdleServerIsUnderloaded) {
  const double t0 = NowUs();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double t1 = NowUs();
  const auto steps = engine_->steps().Since(t0);
  const auto r = Analyze(steps, t0, t1, *cal_, ContextFromEngine(*engine_));
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kUnderloaded);
}

// Decode steps at batch 64 lie past the ridge on most CPUs (f32 or AVX-512 bf16 GEMMs: a ridge
// of 11-29 FLOP/B, these steps at 41-56) but at it where AMX sets the peak (the 2-core Xeon:
// 41 FLOP/B against a ridge of 35-47 as the load moves the calibration). The verdict must be
// the side of the ridge the steps are on; within 15 % of it either class is right.
void ExpectSideOfTheRidge(const DiagnosticsReport& r) {
  ASSERT_GT(r.profile.ridge, 0);
  const double side = r.profile.intensity / r.profile.ridge;
  if (side >= 1.15) {
    EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kComputeBound) << r.verdict.summary;
  } else if (side <= 0.85) {
    EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kMemoryBound) << r.verdict.summary;
  } else {
    EXPECT_TRUE(r.verdict.bottleneck == Bottleneck::kComputeBound ||
                r.verdict.bottleneck == Bottleneck::kMemoryBound)
        << r.verdict.summary;
  }
}

class SmallWorkload : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_ = MakeEngine("small", 64, 128).release();
    ASSERT_NE(engine_, nullptr);
    cal_ = new Calibration(Calibrated(engine_));
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete cal_;
  }
  static Engine* engine_;
  static Calibration* cal_;
};
Engine* SmallWorkload::engine_ = nullptr;
Calibration* SmallWorkload::cal_ = nullptr;

TEST_F(SmallWorkload, BatchOneDecodeIsMemoryBound) {
  SetMaxNumSeqs(engine_, 1);
  const auto steps = RunConcurrent(engine_, 2, 8, 10);  // one runs, one waits
  const auto r = Diagnose(*engine_, *cal_, steps);
  EXPECT_EQ(r.verdict.bottleneck, Bottleneck::kMemoryBound) << r.verdict.summary;
  EXPECT_LT(r.profile.intensity, r.profile.ridge / 2);
  ASSERT_FALSE(r.profile.classes.empty());
  EXPECT_EQ(r.profile.classes[0].op_class, OpClass::kGemm);
}

TEST_F(SmallWorkload, Concurrency64IsComputeBound) {
  SetMaxNumSeqs(engine_, 64);
  const auto all = RunConcurrent(engine_, 64, 4, 4);
  std::vector<StepRecord> decode;  // the decode steps at batch 64
  for (const StepRecord& s : all) {
    if (s.num_prefill_tokens == 0 && s.num_seqs == 64) decode.push_back(s);
  }
  ASSERT_FALSE(decode.empty());
  ExpectSideOfTheRidge(Diagnose(*engine_, *cal_, decode));
  // 64 clients with 32-token prompts: their prefill steps (up to 2048 rows) put the window past
  // any CPU's ridge (with 4-token prompts it sat at AMX's: 47 FLOP/B against 48.5).
  const auto window = RunConcurrent(engine_, 64, 32, 4);
  const auto r = Diagnose(*engine_, *cal_, window);
  EXPECT_EQ(r.verdict.step_bound, Bottleneck::kComputeBound) << r.verdict.summary;
  EXPECT_GT(r.profile.intensity, 1.15 * r.profile.ridge);
}

TEST_F(SmallWorkload, CalibratedUnderLoadKeepsTheClasses) {
  testing_diag::BusyProcesses busy(2);
  ASSERT_EQ(busy.count(), 2);
  const Calibration cal = Calibrated(engine_);
  std::printf("under load: %s\n%s\n", cal.gemm_method.c_str(), cal.bandwidth_method.c_str());
  SetMaxNumSeqs(engine_, 1);
  const auto one = Diagnose(*engine_, cal, RunConcurrent(engine_, 2, 8, 10));
  EXPECT_EQ(one.verdict.bottleneck, Bottleneck::kMemoryBound) << one.verdict.summary;
  ExpectHonest(one);
  SetMaxNumSeqs(engine_, 64);
  const auto all = RunConcurrent(engine_, 64, 4, 4);
  std::vector<StepRecord> decode;
  for (const StepRecord& s : all) {
    if (s.num_prefill_tokens == 0 && s.num_seqs == 64) decode.push_back(s);
  }
  ASSERT_FALSE(decode.empty());
  const auto wide = Diagnose(*engine_, cal, decode);
  ExpectSideOfTheRidge(wide);
  ExpectHonest(wide);
}

// Follows the plan once: at max_num_seqs=1 with 6 requests waiting the plan raises
// max_num_seqs; after applying it the tracker compares measured with predicted.
TEST_F(SmallWorkload, FollowsThePlanAndTracksTheError) {
  SetMaxNumSeqs(engine_, 1);
  const double t0 = NowUs();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    auto s = RequestStream::Open(engine_, Req(8, 24, i));
    ASSERT_TRUE(s.ok());
    streams.push_back(std::move(*s));
  }
  while (engine_->steps().Since(t0).size() < 8) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto before = engine_->steps().Since(t0);
  const auto r = Diagnose(*engine_, *cal_, before);
  ASSERT_FALSE(r.plan.actions.empty());
  const Action& a = r.plan.actions.front();
  EXPECT_EQ(a.kind, ActionKind::kRaiseMaxNumSeqs);
  EXPECT_GT(a.to, 1);
  PlanTracker tracker;
  ASSERT_TRUE(engine_->UpdateOptions(EngineOptions{int(a.to), 2048, false}).ok());
  tracker.RecordApplied(a, r.model, ContextFromEngine(*engine_), r.plan.context, NowUs());
  for (auto& s : streams) s->Drain(nullptr);
  const auto o = tracker.Evaluate(engine_->steps().Since(t0));
  ASSERT_TRUE(o.has_value());
  std::printf(
      "plan %s: predicted %.1f tok/s TPOT %.1f ms; measured %.1f tok/s TPOT %.1f ms at "
      "batch %.1f over %d steps: error %+.1f%% (model at that batch %+.1f%%)\n",
      a.what.c_str(), o->predicted_tokens_per_s, o->predicted_tpot_ms, o->measured_tokens_per_s,
      o->measured_tpot_ms, o->measured_batch, o->steady_steps, 100 * o->tokens_per_s_error,
      100 * o->model_error);
  EXPECT_GT(o->steady_steps, 0);
  EXPECT_GT(o->measured_tokens_per_s, 0);
}

}  // namespace
}  // namespace saturn
