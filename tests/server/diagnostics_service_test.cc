// saturn.v1.Diagnostics on a real server (loopback, CPU backend, tiny model): reports after
// load and when idle, trace export, the watch stream (cancel and shutdown), argument errors,
// UNAVAILABLE before the engine is ready, and closing the loop on an applied plan action.
// Assertions rest on classes, presence and counts, never on how fast the machine is.
#include "server/diag/diagnostics_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tests/server/diagnostics_test_util.h"

namespace saturn::testing {
namespace {

class DiagnosticsServiceTest : public SharedServerTestWith<DiagConfig> {
 protected:
  void SetUp() override {
    SharedServerTestWith::SetUp();
    if (HasFatalFailure()) return;
    stub_ = v1::Diagnostics::NewStub(server_->channel);
  }
  std::unique_ptr<v1::Diagnostics::Stub> stub_;
};

TEST_F(DiagnosticsServiceTest, ReportAfterLoadHasClassSignalsAndText) {
  const double t0 = NowUs();
  for (const StreamResult& r : RunConcurrent(server_->stub.get(), 4, 8, 32)) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  }
  v1::GetDiagnosticsRequest req;
  req.set_window_begin_us(t0);
  req.set_window_end_us(NowUs());
  req.set_include_json(true);
  req.set_max_step_points(16);
  v1::DiagnosticsReport rep;
  ASSERT_TRUE(GetDiagnostics(stub_.get(), req, &rep).ok());
  EXPECT_NE(rep.bottleneck(), v1::BOTTLENECK_UNKNOWN) << rep.summary();
  EXPECT_FALSE(rep.signals().empty());
  EXPECT_GT(rep.profile().steps(), 0);
  EXPECT_GT(rep.profile().tokens_per_s(), 0);
  EXPECT_FALSE(rep.classes().empty());
  EXPECT_NE(rep.text().find("verdict"), std::string::npos) << rep.text();
  EXPECT_GT(rep.calibration().gemm_flops_per_s(), 0);
  EXPECT_EQ(rep.nvml_utilization(), -1);  // CPU backend
  EXPECT_GT(rep.step_points_size(), 0);
  EXPECT_LE(rep.step_points_size(), 16);
  const auto json = nlohmann::json::parse(rep.json());
  EXPECT_TRUE(json.contains("verdict") || json.contains("profile")) << rep.json().substr(0, 200);
  // The default window (seconds ending now) also covers that load.
  v1::DiagnosticsReport recent;
  v1::GetDiagnosticsRequest by_seconds;
  by_seconds.set_window_seconds(600);
  ASSERT_TRUE(GetDiagnostics(stub_.get(), by_seconds, &recent).ok());
  EXPECT_GE(recent.profile().steps(), rep.profile().steps());
}

TEST_F(DiagnosticsServiceTest, IdleServerIsUnderloaded) {
  // Steps in the ring from before the window (as after any earlier load) are not the idle
  // window's: it is not widened back to them.
  RunConcurrent(server_->stub.get(), 2, 8, 4);
  ASSERT_TRUE(WaitForKvFree(*server_->engine()));
  const double t0 = NowUs();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  v1::GetDiagnosticsRequest req;
  req.set_window_begin_us(t0);
  req.set_window_end_us(NowUs());
  v1::DiagnosticsReport rep;
  ASSERT_TRUE(GetDiagnostics(stub_.get(), req, &rep).ok());
  EXPECT_EQ(rep.bottleneck(), v1::BOTTLENECK_UNDERLOADED) << rep.text();
  EXPECT_EQ(rep.profile().steps(), 0);
}

TEST_F(DiagnosticsServiceTest, WindowShorterThanAFewStepsIsWidenedToThem) {
  RunConcurrent(server_->stub.get(), 2, 8, 16);
  ASSERT_TRUE(WaitForKvFree(*server_->engine()));
  const std::vector<StepRecord> last = server_->engine()->steps().Last(1);
  ASSERT_FALSE(last.empty());
  // A window inside the last step: no complete step in it, and far shorter than three steps.
  v1::GetDiagnosticsRequest req;
  req.set_window_begin_us(last.back().start_us + 1);
  req.set_window_end_us(last.back().end_us);
  v1::DiagnosticsReport rep;
  ASSERT_TRUE(GetDiagnostics(stub_.get(), req, &rep).ok());
  EXPECT_EQ(rep.profile().steps(), 3) << rep.text();
  EXPECT_LE(rep.window_begin_us(), last.back().start_us);
}

TEST_F(DiagnosticsServiceTest, ExportTraceIsOrderedAndNested) {
  RunConcurrent(server_->stub.get(), 2, 8, 32);  // more than 10 steps on a fresh server
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(60)));
  v1::ExportTraceRequest req;
  req.set_max_steps(10);
  v1::ExportTraceResponse resp;
  ASSERT_TRUE(stub_->ExportTrace(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.num_steps(), 10);
  const auto doc = nlohmann::json::parse(resp.trace_json());
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, std::vector<nlohmann::json>> tracks;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "M") tracks[e["tid"].get<int>()].push_back(e);
  }
  ASSERT_EQ(tracks.size(), 2u);  // host and device
  for (auto& [tid, events] : tracks) {
    double parent_b = -1, parent_e = -1, prev_end = -1, prev_ts = -1;
    int steps = 0;
    for (const auto& e : events) {
      ASSERT_EQ(e["ph"], "X");
      const double b = e["ts"], end = b + e["dur"].get<double>();
      EXPECT_GE(b, prev_ts);
      prev_ts = b;
      if (e["cat"] == "step") {
        EXPECT_GE(b, parent_e);
        parent_b = b, parent_e = end, prev_end = b;
        ++steps;
        continue;
      }
      EXPECT_GE(b, parent_b - 1e-9);
      EXPECT_LE(end, parent_e + 1e-9);
      EXPECT_GE(b, prev_end - 1e-9);
      prev_end = end;
    }
    EXPECT_EQ(steps, 10) << "track " << tid;
  }
}

TEST_F(DiagnosticsServiceTest, WatchYieldsReportsAndEndsOnCancel) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(60)));
  v1::WatchDiagnosticsRequest req;
  req.set_interval_ms(100);
  req.set_window_seconds(5);
  auto reader = stub_->WatchDiagnostics(&ctx, req);
  v1::DiagnosticsReport rep;
  int n = 0;
  while (n < 2 && reader->Read(&rep)) {
    EXPECT_FALSE(rep.text().empty());
    ++n;
  }
  ASSERT_EQ(n, 2);
  ctx.TryCancel();
  while (reader->Read(&rep)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server forgets the stream (its call registration ends).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (server_->app->state()->active_calls() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->app->state()->active_calls(), 0);
}

TEST_F(DiagnosticsServiceTest, BadArgumentsAreInvalidArgumentNamingTheField) {
  auto expect_invalid = [&](const v1::GetDiagnosticsRequest& req, const std::string& field) {
    v1::DiagnosticsReport rep;
    grpc::Status s = GetDiagnostics(stub_.get(), req, &rep);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(s.error_message().find(field), std::string::npos) << s.error_message();
  };
  const double now = NowUs();
  v1::GetDiagnosticsRequest r;
  r.set_window_seconds(-1);
  expect_invalid(r, "window_seconds");
  r.set_window_seconds(1e9);
  expect_invalid(r, "window_seconds");
  r = {};
  r.set_window_begin_us(now);
  r.set_window_end_us(now - 1000);
  expect_invalid(r, "window_end_us");
  r.set_window_end_us(now + 3600e6);
  expect_invalid(r, "window_end_us");
  r = {};
  r.set_window_end_us(now);
  expect_invalid(r, "window_begin_us");
  r.set_window_begin_us(now - 1e6);
  r.set_window_seconds(5);
  expect_invalid(r, "window_seconds");
  r = {};
  r.set_max_step_points(-1);
  expect_invalid(r, "max_step_points");

  grpc::ClientContext wctx;
  v1::WatchDiagnosticsRequest w;
  w.set_interval_ms(10);
  auto reader = stub_->WatchDiagnostics(&wctx, w);
  v1::DiagnosticsReport rep;
  EXPECT_FALSE(reader->Read(&rep));
  grpc::Status ws = reader->Finish();
  EXPECT_EQ(ws.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(ws.error_message().find("interval_ms"), std::string::npos) << ws.error_message();

  grpc::ClientContext tctx;
  v1::ExportTraceRequest t;
  t.set_max_steps(1 << 30);
  v1::ExportTraceResponse tr;
  grpc::Status ts = stub_->ExportTrace(&tctx, t, &tr);
  EXPECT_EQ(ts.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(ts.error_message().find("max_steps"), std::string::npos) << ts.error_message();
}

// Closing the loop: a plan read over gRPC, applied with UpdateEngineOptions, is tracked.
TEST_F(DiagnosticsServiceTest, AppliedPlanActionIsTracked) {
  ASSERT_TRUE(SetMaxNumSeqs(server_->stub.get(), 1).ok());
  const double t0 = NowUs();
  std::thread load([&] { RunConcurrent(server_->stub.get(), 6, 8, 160); });
  // A failed ASSERT returns early: the load still ends and is joined (not std::terminate).
  struct JoinOnExit {
    std::thread& t;
    ~JoinOnExit() {
      if (t.joinable()) t.join();
    }
  } join_load{load};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (server_->engine()->steps().Since(t0).size() < 40 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  v1::GetDiagnosticsRequest req;
  req.set_window_begin_us(t0);
  req.set_window_end_us(NowUs());
  v1::DiagnosticsReport before;
  ASSERT_TRUE(GetDiagnostics(stub_.get(), req, &before).ok());
  const v1::PlanAction* action = nullptr;
  for (const auto& a : before.plan()) {
    if (a.kind() == "raise_max_num_seqs") action = &a;
  }
  if (action == nullptr && !before.plan().empty()) {
    // Another server-side change came first and the batch raise was left to after it (seen
    // under load: n-gram speculation, whose verify rows fill the idle compute a larger batch
    // would use): nothing of this test's to apply and track.
    GTEST_SKIP() << "the plan's actions do not raise max_num_seqs (first: " << before.plan(0).what()
                 << ")\n"
                 << before.text();
  }
  if (action == nullptr) {
    // The plan raises max_num_seqs only when its measured steps predict a gain. Where each
    // row costs about as much as a whole step (sanitizer builds instrument every load of the
    // CPU kernels; a contended machine stretches the probe steps) it rightly finds none, and
    // says why; then there is no action to apply and track (plan_tracker_test covers the
    // tracker itself). The report must carry that evidence: the plateau at batch 1, a
    // plateau close to the measured batch-1 rate (within 25 %: the plan interpolates the
    // curve at the window's context), or the note naming the raise the step model suggested
    // and the measured steps declined (seen in CI: probes on a contended machine, 44 % CPU).
    double batch1_tps = 0;
    for (const auto& pt : before.plan_curve().decode()) {
      if (pt.x() == 1 && pt.us() > 0) batch1_tps = 1e6 / pt.us();
    }
    EXPECT_FALSE(before.plan_note().empty()) << before.text();
    const bool declined =
        before.plan_note().find("raise max_num_seqs 1 -> ") != std::string::npos &&
        before.plan_note().find("was weighed and declined") != std::string::npos;
    EXPECT_TRUE(before.plateau_batch() <= 1 || before.plateau_tokens_per_s() < 1.25 * batch1_tps ||
                declined)
        << before.text();
    GTEST_SKIP() << "the measured steps predict no gain from a larger batch on this build and "
                    "load (plateau at batch "
                 << before.plateau_batch() << ", " << before.plateau_tokens_per_s()
                 << " tok/s): nothing to apply and track\n"
                 << before.text();
  }
  // How far the prediction may be off travels with it (at least the curve's 2 %).
  EXPECT_GE(action->expected_error(), 0.02) << before.text();
  EXPECT_GE(action->prefill_share(), 0);
  EXPECT_LT(action->prefill_share(), 1);
  EXPECT_FALSE(before.has_tracked());
  {
    grpc::ClientContext ctx;
    v1::UpdateEngineOptionsRequest u;
    u.set_max_num_seqs(action->max_num_seqs());
    u.set_max_num_batched_tokens(action->max_num_batched_tokens());
    u.set_cuda_graphs(action->cuda_graphs());
    v1::UpdateEngineOptionsResponse resp;
    ASSERT_TRUE(server_->stub->UpdateEngineOptions(&ctx, u, &resp).ok());
  }
  EXPECT_TRUE(server_->app->diagnostics()->session().tracking());
  if (load.joinable()) load.join();
  req.set_window_end_us(NowUs());
  v1::DiagnosticsReport after;
  ASSERT_TRUE(GetDiagnostics(stub_.get(), req, &after).ok());
  ASSERT_TRUE(after.has_tracked()) << after.text();
  EXPECT_EQ(after.tracked().kind(), "raise_max_num_seqs");
  EXPECT_GT(after.tracked().predicted_tokens_per_s(), 0);
  EXPECT_GT(after.tracked().steady_steps(), 0);
  EXPECT_GT(after.tracked().measured_tokens_per_s(), 0);
  EXPECT_NE(after.text().find(after.tracked().what()), std::string::npos) << after.text();
  std::printf("%s\n", after.text().c_str());
  // A change no plan proposed (plans use multiples of 64 tokens) stops the tracking.
  grpc::ClientContext ctx;
  v1::UpdateEngineOptionsRequest u;
  u.set_max_num_seqs(64);
  u.set_max_num_batched_tokens(2047);
  v1::UpdateEngineOptionsResponse resp;
  ASSERT_TRUE(server_->stub->UpdateEngineOptions(&ctx, u, &resp).ok());
  EXPECT_FALSE(server_->app->diagnostics()->session().tracking());
}

TEST(DiagnosticsLifecycleTest, UnavailableBeforeTheEngineIsReady) {
  auto s = StartServer(DiagConfig(), /*load=*/false);
  ASSERT_NE(s, nullptr);
  auto stub = v1::Diagnostics::NewStub(s->channel);
  v1::DiagnosticsReport rep;
  EXPECT_EQ(GetDiagnostics(stub.get(), {}, &rep).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Every watch stream builds its reports on the one timer thread: past the limit the next one is
// refused, and a closed stream gives its place back.
TEST_F(DiagnosticsServiceTest, WatchStreamsAreBounded) {
  struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::DiagnosticsReport>> reader;
  };
  const auto open = [&](Watch& w) {
    v1::WatchDiagnosticsRequest req;
    req.set_interval_ms(3600 * 1000);  // one report, then nothing until cancelled
    w.reader = stub_->WatchDiagnostics(&w.ctx, req);
    v1::DiagnosticsReport rep;
    return w.reader->Read(&rep);
  };
  std::vector<std::unique_ptr<Watch>> open_ones;
  for (int i = 0; i < DiagnosticsService::kMaxWatchStreams; ++i) {
    open_ones.push_back(std::make_unique<Watch>());
    ASSERT_TRUE(open(*open_ones.back())) << "stream " << i;
  }
  Watch refused;
  EXPECT_FALSE(open(refused));
  const grpc::Status st = refused.reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("WatchDiagnostics"), std::string::npos) << st.error_message();
  // Closing one frees its place (once the server has seen the cancel).
  open_ones.back()->ctx.TryCancel();
  (void)open_ones.back()->reader->Finish();
  open_ones.pop_back();
  bool reopened = false;
  for (int i = 0; i < 200 && !reopened; ++i) {
    auto w = std::make_unique<Watch>();
    reopened = open(*w);
    if (reopened) {
      open_ones.push_back(std::move(w));
    } else {
      (void)w->reader->Finish();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_TRUE(reopened);
  for (auto& w : open_ones) {
    w->ctx.TryCancel();
    (void)w->reader->Finish();
  }
}

TEST(DiagnosticsLifecycleTest, ShutdownEndsAWatchPromptly) {
  ServerConfig config = DiagConfig();
  config.shutdown_grace = absl::Seconds(60);
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  auto stub = v1::Diagnostics::NewStub(s->channel);
  grpc::ClientContext ctx;
  v1::WatchDiagnosticsRequest req;
  req.set_interval_ms(3600 * 1000);  // one report, then only shutdown ends it
  auto reader = stub->WatchDiagnostics(&ctx, req);
  v1::DiagnosticsReport rep;
  ASSERT_TRUE(reader->Read(&rep));
  const auto t0 = std::chrono::steady_clock::now();
  s->app->Shutdown();
  // Well under the 60 s grace: the watch ended itself when the server started draining.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  while (reader->Read(&rep)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace saturn::testing
