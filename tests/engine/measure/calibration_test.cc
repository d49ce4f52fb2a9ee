// Calibration's own rules on the host: a graph launch is measured where the backend captures
// graphs (through the capturing test backend) and released after, not where it cannot; the
// figure survives the JSON file; every stored field survives it, and a file without a
// required one is refused by name; trials warm the device up first when asked.
#include "engine/measure/calibration.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "engine/measure/calibration_fields.h"
#include "engine/measure/calibration_trials.h"
#include "tests/engine/capturing_backend.h"
#include "tests/engine/measure/calibration_values.h"

namespace saturn {
namespace {

CalibrationOptions Small() {
  CalibrationOptions o;
  o.gemm_size = 64;
  o.copy_bytes = size_t{1} << 20;
  o.dispatch_ops = 100;
  o.repeats = 2;
  o.min_trial_s = 0.002;
  o.min_trials = 2;
  o.max_trials = 2;
  return o;
}

TEST(CalibrationTest, GraphLaunchIsMeasuredWhereTheBackendHasGraphs) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", 1, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  testing_runner::CapturingBackend backend(std::move(*cpu));
  absl::StatusOr<Calibration> c = Calibrate(&backend, Small());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->graph_launch_us, 0.0);
  EXPECT_NE(c->dispatch_method.find("graph launch"), std::string::npos) << c->dispatch_method;
  EXPECT_EQ(backend.num_graphs(), 1u);
  EXPECT_EQ(backend.live_graphs(), 0);  // released after measuring
  absl::StatusOr<Calibration> back = CalibrationFromJson(CalibrationToJson(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_DOUBLE_EQ(back->graph_launch_us, c->graph_launch_us);
}

TEST(CalibrationTest, NoGraphLaunchWithoutGraphs) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", 1, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<Calibration> c = Calibrate(cpu->get(), Small());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->graph_launch_us, 0.0);
  EXPECT_EQ(c->dispatch_method.find("graph launch"), std::string::npos);
  // A file from before graph launches were measured still loads, with none.
  std::string json = CalibrationToJson(*c);
  const size_t at = json.find("\"graph_launch_us\"");
  ASSERT_NE(at, std::string::npos);
  json.erase(at, json.find('\n', at) - at + 1);
  absl::StatusOr<Calibration> old = CalibrationFromJson(json);
  ASSERT_TRUE(old.ok()) << old.status() << json;
  EXPECT_EQ(old->graph_launch_us, 0.0);
}

// The host's cache is recorded where the backend computes on the host's cores (what says a
// model's weights may sit in it, self_check.cc), and not where a device computes: the capturing
// backend stands in for one, though it wraps the CPU backend.
TEST(CalibrationTest, TheHostCacheIsRecordedOnlyWhereTheBackendComputesOnTheHost) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", 1, "f32");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const Backend::HostCompute host = (*cpu)->host_compute();
  EXPECT_EQ(host.threads, 1);
  absl::StatusOr<Calibration> on_host = Calibrate(cpu->get(), Small());
  ASSERT_TRUE(on_host.ok()) << on_host.status();
  EXPECT_EQ(on_host->cache_bytes, static_cast<double>(host.cache_bytes));

  testing_runner::CapturingBackend device(std::move(*cpu));
  EXPECT_EQ(device.host_compute().threads, 0);
  absl::StatusOr<Calibration> off_host = Calibrate(&device, Small());
  ASSERT_TRUE(off_host.ok()) << off_host.status();
  EXPECT_EQ(off_host->cache_bytes, 0.0);
}

TEST(CalibrationTest, EveryStoredFieldSurvivesTheFile) {
  const Calibration c = testing_calibration::DistinctValues();
  absl::StatusOr<Calibration> back = CalibrationFromJson(CalibrationToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  for (const CalibrationField& f : kCalibrationFields) {
    std::visit([&](auto member) { EXPECT_EQ((*back).*member, c.*member) << f.name; }, f.member);
  }
  const auto j = nlohmann::json::parse(CalibrationToJson(c));
  EXPECT_DOUBLE_EQ(j.at("ridge_flops_per_byte").get<double>(), c.ridge_flops_per_byte());
}

TEST(CalibrationTest, AFileWithoutARequiredFieldIsRefusedByName) {
  const auto full = nlohmann::json::parse(CalibrationToJson(testing_calibration::DistinctValues()));
  int required = 0;
  for (const CalibrationField& f : kCalibrationFields) {
    nlohmann::json j = full;
    j.erase(f.name);
    absl::StatusOr<Calibration> c = CalibrationFromJson(j.dump());
    if (!f.required) {  // read as the default (op_issue_us: as the dispatch cost)
      ASSERT_TRUE(c.ok()) << f.name << ": " << c.status();
      const Calibration defaults;
      std::visit(
          [&](auto member) {
            if (std::string(f.name) == "op_issue_us") {
              EXPECT_EQ(c->op_issue_us, c->op_dispatch_us);
            } else {
              EXPECT_EQ((*c).*member, defaults.*member) << f.name;
            }
          },
          f.member);
      continue;
    }
    ++required;
    ASSERT_FALSE(c.ok()) << f.name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(f.name), std::string::npos) << c.status();
  }
  EXPECT_EQ(required, 6);
  // A field of the wrong type is refused, not read as a default.
  nlohmann::json j = full;
  j["stable"] = "yes";
  EXPECT_FALSE(CalibrationFromJson(j.dump()).ok());
  // ... and named, without the JSON library's tag.
  j = full;
  j["gemm_flops_per_s"] = nullptr;
  const absl::Status s = CalibrationFromJson(j.dump()).status();
  EXPECT_EQ(s.message(), "calibration: field 'gemm_flops_per_s': type must be number, but is null");
}

TEST(CalibrationTest, TrialsWarmTheDeviceUpFirstWhenAsked) {
  int calls = 0;
  TrialOptions opt;
  opt.min_trial_s = 0.001;
  opt.min_trials = 1;
  opt.max_trials = 1;
  opt.correct_contention = false;
  opt.warmup_s = 0.05;
  absl::StatusOr<TrialSeries> s = RunTrials(
      [&] {
        ++calls;
        return absl::OkStatus();
      },
      1.0, opt);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GE(s->warmup_s, 0.05);
  EXPECT_NE(s->Describe().find("warm-up"), std::string::npos) << s->Describe();
  opt.warmup_s = 0;
  const int before = calls;
  s = RunTrials(
      [&] {
        ++calls;
        return absl::OkStatus();
      },
      1.0, opt);
  ASSERT_TRUE(s.ok());
  EXPECT_LT(s->warmup_s, 0.05);
  EXPECT_EQ(s->Describe().find("warm-up"), std::string::npos);
  EXPECT_GT(calls, before);
}

}  // namespace
}  // namespace saturn
