// Calibration at server start: GetServerInfo reports it (with how it was measured) and the
// CUDA graph info; --save_calibration then --calibration=file round-trips it; a missing or
// malformed file is an error naming --calibration_file. A calibration far below what the
// server then achieves is flagged suspect (reports, GetServerInfo); Recalibrate measures
// again between steps while requests stream, and clears the flag. A wider token budget from
// UpdateEngineOptions probes the longer prefill chunks it allows.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "tests/server/diagnostics_test_util.h"

namespace saturn::testing {
namespace {

namespace fs = std::filesystem;

v1::ServerInfo Info(TestServer* s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(30)));
  v1::ServerInfo info;
  EXPECT_TRUE(s->stub->GetServerInfo(&ctx, {}, &info).ok());
  return info;
}

TEST(DiagnosticsCalibrationTest, MeasuredSavedAndLoadedBack) {
  const fs::path path =
      fs::temp_directory_path() / ("saturn_cal_rt_" + std::to_string(::getpid()) + ".json");
  ServerConfig config = TinyConfig();
  config.save_calibration = path.string();
  v1::Calibration measured;
  {
    auto s = StartServer(config);
    ASSERT_NE(s, nullptr);
    const v1::ServerInfo info = Info(s.get());
    ASSERT_TRUE(info.has_calibration());
    measured = info.calibration();
    EXPECT_EQ(measured.source(), "measured");
    EXPECT_EQ(measured.backend(), "cpu");
    EXPECT_GT(measured.gemm_flops_per_s(), 0);
    EXPECT_GT(measured.bandwidth_bytes_per_s(), 0);
    EXPECT_GT(measured.op_dispatch_us(), 0);
    EXPECT_GT(measured.ridge_flops_per_byte(), 0);
    EXPECT_FALSE(measured.gemm_method().empty());
    EXPECT_FALSE(measured.bandwidth_method().empty());
    EXPECT_FALSE(measured.dispatch_method().empty());
    EXPECT_GT(measured.calibration_ms(), 0);
    EXPECT_TRUE(info.has_cuda_graphs());
    EXPECT_EQ(info.cuda_graphs().captured_sizes_size(), 0);  // CPU backend: no graphs
  }
  ASSERT_TRUE(fs::exists(path));
  config.save_calibration.clear();
  config.calibration = "file";
  config.calibration_file = path.string();
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  const v1::Calibration loaded = Info(s.get()).calibration();
  EXPECT_EQ(loaded.source(), path.string());
  EXPECT_DOUBLE_EQ(loaded.gemm_flops_per_s(), measured.gemm_flops_per_s());
  EXPECT_DOUBLE_EQ(loaded.bandwidth_bytes_per_s(), measured.bandwidth_bytes_per_s());
  EXPECT_DOUBLE_EQ(loaded.op_dispatch_us(), measured.op_dispatch_us());
  EXPECT_EQ(loaded.gemm_method(), measured.gemm_method());
  EXPECT_EQ(loaded.calibration_ms(), 0);
  fs::remove(path);
}

TEST(DiagnosticsCalibrationTest, SuspectCeilingsAreFlaggedAndRecalibrateReplacesThem) {
  // Ceilings 1000x too low, as a start on a badly loaded machine could measure.
  const fs::path path =
      fs::temp_directory_path() / ("saturn_cal_low_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f(path);
    f << R"({"backend": "cpu", "device": "x", "dtype": "f32", "gemm_flops_per_s": 1e7,
             "bandwidth_bytes_per_s": 1e6, "op_dispatch_us": 1})";
  }
  ServerConfig config = TinyConfig();
  config.calibration = "file";
  config.calibration_file = path.string();
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  auto diag = v1::Diagnostics::NewStub(s->channel);
  const double t0 = NowUs();
  RunConcurrent(s->stub.get(), 4, 16, 24);
  v1::GetDiagnosticsRequest req;
  req.set_window_begin_us(t0);
  req.set_window_end_us(NowUs());
  v1::DiagnosticsReport report;
  ASSERT_TRUE(GetDiagnostics(diag.get(), req, &report).ok());
  EXPECT_TRUE(report.calibration().suspect()) << report.text();
  ASSERT_GT(report.calibration_notes_size(), 0);
  EXPECT_NE(report.text().find("SUSPECT"), std::string::npos) << report.text();
  EXPECT_GT(report.judged_bytes_per_s(), 1e6);
  EXPECT_LE(report.profile().mbu(), 1.0 + 1e-9);
  EXPECT_LE(report.profile().mfu(), 1.0 + 1e-9);
  const v1::Calibration before = Info(s.get()).calibration();
  EXPECT_TRUE(before.suspect());
  EXPECT_FALSE(before.suspect_reason().empty());

  // The start probed steps (--probe_steps_ms); Recalibrate probes them again.
  const std::optional<StepProbe> probe0 = s->engine()->step_probe();
  ASSERT_TRUE(probe0.has_value());
  EXPECT_FALSE(probe0->series.empty());

  // Recalibrate while requests stream: it runs between two steps and every request finishes.
  std::thread load([&] { RunConcurrent(s->stub.get(), 2, 8, 64); });
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(120)));
  v1::RecalibrateResponse resp;
  const grpc::Status st = diag->Recalibrate(&ctx, {}, &resp);
  load.join();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(resp.previous().suspect());
  EXPECT_EQ(resp.previous().gemm_flops_per_s(), 1e7);
  EXPECT_EQ(resp.calibration().source(), "measured");
  EXPECT_GT(resp.calibration().gemm_flops_per_s(), 1e7);
  EXPECT_GT(resp.calibration().stream_bandwidth_bytes_per_s(), 0);
  EXPECT_GT(resp.calibration().copy_bandwidth_bytes_per_s(), 0);
  EXPECT_FALSE(resp.calibration().suspect());
  EXPECT_GE(resp.calibration().age_s(), 0);
  const v1::Calibration after = Info(s.get()).calibration();
  EXPECT_FALSE(after.suspect());
  EXPECT_EQ(after.gemm_flops_per_s(), resp.calibration().gemm_flops_per_s());
  EXPECT_GT(after.calibration_ms(), 0);
  const std::optional<StepProbe> probe1 = s->engine()->step_probe();
  ASSERT_TRUE(probe1.has_value());
  EXPECT_GT(probe1->unix_s, probe0->unix_s);
  fs::remove(path);
}

// Each Recalibrate takes the device for a while: calls that overlap one in progress are
// refused at once (abandoned ones once queued behind each other and held serving up), and
// the next call after them runs.
TEST(DiagnosticsCalibrationTest, RecalibrateRunsOneCallAtATime) {
  ServerConfig config = TinyConfig();
  config.probe_steps_ms = 0;
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  auto diag = v1::Diagnostics::NewStub(s->channel);
  const auto recalibrate = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(std::chrono::seconds(120)));
    v1::RecalibrateResponse resp;
    return diag->Recalibrate(&ctx, {}, &resp);
  };
  std::vector<grpc::Status> got(4);
  std::vector<std::thread> callers;
  for (grpc::Status& st : got) callers.emplace_back([&] { st = recalibrate(); });
  for (std::thread& t : callers) t.join();
  int ok = 0;
  for (const grpc::Status& st : got) {
    if (st.ok()) {
      ++ok;
      continue;
    }
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_NE(st.error_message().find("Recalibrate"), std::string::npos) << st.error_message();
  }
  EXPECT_GE(ok, 1);
  // A call its client abandoned while it waited frees the slot too.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(std::chrono::milliseconds(1)));
    v1::RecalibrateResponse resp;
    (void)diag->Recalibrate(&ctx, {}, &resp);
  }
  grpc::Status last;
  for (int i = 0; i < 600; ++i) {  // the abandoned call may still be running
    last = recalibrate();
    if (last.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(last.ok()) << last.error_message();
}

TEST(DiagnosticsCalibrationTest, ProbeStepsCanBeTurnedOff) {
  ServerConfig config = TinyConfig();
  config.probe_steps_ms = 0;
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->engine()->step_probe().has_value());
}

TEST(DiagnosticsCalibrationTest, WideningTheTokenBudgetProbesTheLongerChunks) {
  ServerConfig config = DiagConfig();
  config.engine.options.max_num_batched_tokens = 64;
  config.probe_steps_ms = 8000;  // quick calibration: an eighth
  auto s = StartServer(config);
  ASSERT_NE(s, nullptr);
  const std::optional<StepProbe> probe0 = s->engine()->step_probe();
  ASSERT_TRUE(probe0.has_value());
  ASSERT_EQ(probe0->requested_prefill_tokens, 64);
  v1::UpdateEngineOptionsRequest req;
  req.set_max_num_batched_tokens(512);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(std::chrono::seconds(60)));
  v1::UpdateEngineOptionsResponse resp;
  ASSERT_TRUE(s->stub->UpdateEngineOptions(&ctx, req, &resp).ok());
  // The probe runs once the reply is sent: wait for it.
  std::optional<StepProbe> probe1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    probe1 = s->engine()->step_probe();
    if (probe1.has_value() && probe1->unix_s > probe0->unix_s) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(probe1.has_value());
  ASSERT_GT(probe1->unix_s, probe0->unix_s) << "no probe after the wider token budget";
  // It asked for the chunks the budget now allows (how many it measured depends on the probe
  // budget and the machine), kept every chunk and decode batch of the start-up probe, and
  // measured nothing at or under the old budget again.
  EXPECT_EQ(probe1->requested_prefill_tokens, 512);
  EXPECT_LE(probe1->max_prefill_tokens, 512);
  std::vector<int> chunks0, chunks1, batches0, batches1;
  for (const ProbeSeries& p : probe0->series) (p.prefill ? chunks0 : batches0).push_back(p.rows);
  for (const ProbeSeries& p : probe1->series) (p.prefill ? chunks1 : batches1).push_back(p.rows);
  EXPECT_EQ(batches1, batches0);
  ASSERT_GE(chunks1.size(), chunks0.size());
  EXPECT_EQ(std::vector<int>(chunks1.begin(), chunks1.begin() + chunks0.size()), chunks0);
  for (size_t i = chunks0.size(); i < chunks1.size(); ++i) EXPECT_GT(chunks1[i], 64);
}

TEST(DiagnosticsCalibrationTest, BadFileFlagsAreErrorsNamingTheFlag) {
  ServerConfig config = TinyConfig();
  config.calibration = "file";
  absl::Status v = config.Validate();
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.message().find("--calibration_file"), std::string::npos) << v;
  config.calibration = "guess";
  v = config.Validate();
  EXPECT_NE(v.message().find("--calibration"), std::string::npos) << v;

  const fs::path bad =
      fs::temp_directory_path() / ("saturn_cal_bad_" + std::to_string(::getpid()) + ".json");
  std::ofstream(bad) << "{ not json";
  for (const std::string& path : {bad.string(), bad.string() + ".missing"}) {
    config.calibration = "file";
    config.calibration_file = path;
    ASSERT_TRUE(config.Validate().ok());
    ServerApp app(config);
    ASSERT_TRUE(app.StartListening().ok());
    absl::Status s = app.LoadEngine();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("--calibration_file"), std::string::npos) << s;
  }
  fs::remove(bad);
}

}  // namespace
}  // namespace saturn::testing
