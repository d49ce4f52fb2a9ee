// A report's whole input written as a recording and read back judges the same: live (an
// in-process CPU engine under load, through the server's DiagnosticsSession) and offline (the
// recording's JSON in a session without an engine) give identical verdicts, figures and plans.
// Malformed recordings are refused naming the field.
#include "engine/diag/recording.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/diag/diagnostics_session.h"
#include "engine/engine.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

using testing_diag::StepSpec;
using testing_diag::TrueModel;

// Everything a reader compares: class, figures, plan.
void ExpectSameReport(const DiagnosticsReport& a, const DiagnosticsReport& b) {
  EXPECT_EQ(a.verdict.bottleneck, b.verdict.bottleneck);
  EXPECT_EQ(a.verdict.summary, b.verdict.summary);
  ASSERT_EQ(a.verdict.signals.size(), b.verdict.signals.size());
  for (size_t i = 0; i < a.verdict.signals.size(); ++i) {
    EXPECT_EQ(a.verdict.signals[i].name, b.verdict.signals[i].name);
    EXPECT_EQ(a.verdict.signals[i].value, b.verdict.signals[i].value) << a.verdict.signals[i].name;
  }
  EXPECT_EQ(a.profile.window_s, b.profile.window_s);
  EXPECT_EQ(a.profile.busy_fraction, b.profile.busy_fraction);
  EXPECT_EQ(a.profile.decode_tokens_per_s, b.profile.decode_tokens_per_s);
  EXPECT_EQ(a.profile.mfu, b.profile.mfu);
  EXPECT_EQ(a.profile.mbu, b.profile.mbu);
  EXPECT_EQ(a.plan.note, b.plan.note);
  ASSERT_EQ(a.plan.actions.size(), b.plan.actions.size());
  for (size_t i = 0; i < a.plan.actions.size(); ++i) {
    EXPECT_EQ(a.plan.actions[i].what, b.plan.actions[i].what);
    EXPECT_EQ(a.plan.actions[i].tokens_per_s_after, b.plan.actions[i].tokens_per_s_after);
  }
}

Recording SyntheticRecording() {
  StepSpec s;
  s.seqs = 4;
  s.queue_depth = 2;
  s.max_num_seqs = 4;
  Recording r;
  r.calibration = testing_diag::TestCalibration();
  r.input.steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 40);
  r.input.begin_us = r.input.steps[3].start_us;  // three steps ahead of the window
  r.input.end_us = r.input.steps.back().end_us + 50;
  r.input.ring_total_steps = 40;
  r.input.ring_capacity = 4096;
  r.input.context = testing_diag::TestContext(testing_diag::Small(), 4);
  r.input.context.probe_curve.decode = {{1, 900, 0.02, 3, 0}, {8, 1100, 0.03, 3, 0}};
  r.input.context.probe_context_slopes = {{1, 0.01, 0, 1, 0}};
  r.input.context.graph_sizes = {1, 2, 4};
  r.input.context.run_share = 0.8;
  r.input.context.event_thread = true;
  r.device = "cpu: test";
  return r;
}

TEST(RecordingTest, JsonRoundTripGivesTheSameReport) {
  const Recording rec = SyntheticRecording();
  absl::StatusOr<Recording> back = RecordingFromJson(RecordingToJson(rec));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->input.steps.size(), rec.input.steps.size());
  for (size_t i = 0; i < rec.input.steps.size(); ++i) {
    const StepRecord &a = rec.input.steps[i], &b = back->input.steps[i];
    EXPECT_EQ(a.step_id, b.step_id);
    EXPECT_EQ(a.start_us, b.start_us);
    EXPECT_EQ(a.end_us, b.end_us);
    EXPECT_EQ(a.device_busy_us, b.device_busy_us);
    EXPECT_EQ(a.num_seqs, b.num_seqs);
    EXPECT_EQ(a.context_tokens, b.context_tokens);
    EXPECT_EQ(a.options, b.options);
    for (size_t c = 0; c < a.by_class.size(); ++c) {
      EXPECT_EQ(a.by_class[c].flops, b.by_class[c].flops);
      EXPECT_EQ(a.by_class[c].bytes, b.by_class[c].bytes);
      EXPECT_EQ(a.by_class[c].count, b.by_class[c].count);
    }
  }
  EXPECT_EQ(back->input.context.run_share, 0.8);
  EXPECT_TRUE(back->input.context.event_thread);
  EXPECT_EQ(back->input.context.graph_sizes, rec.input.context.graph_sizes);
  EXPECT_EQ(back->input.context.probe_curve.decode.size(), 2u);
  EXPECT_EQ(back->calibration.gemm_flops_per_s, rec.calibration.gemm_flops_per_s);
  EXPECT_EQ(back->device, "cpu: test");

  DiagnosticsSession a("test"), b("test");
  a.StartOffline(rec.calibration);
  b.StartOffline(back->calibration);
  std::vector<StepRecord> window;
  const DiagnosticsReport ra = a.BuildReport(rec.input, &window);
  const DiagnosticsReport rb = b.BuildReport(back->input);
  EXPECT_EQ(window.size(), 37u);  // the three steps ahead of the window are not in it
  EXPECT_NE(ra.verdict.bottleneck, Bottleneck::kUnknown);
  ExpectSameReport(ra, rb);
}

TEST(RecordingTest, MalformedRecordingsNameTheField) {
  EXPECT_NE(RecordingFromJson("[1,2]").status().message().find("not a JSON object"),
            std::string::npos);
  EXPECT_NE(RecordingFromJson(R"({"format":"trace"})").status().message().find("format"),
            std::string::npos);
  // A format that is not a string threw (saturn-diag analyze aborted).
  EXPECT_NE(RecordingFromJson(R"({"format":5})").status().message().find("format"),
            std::string::npos);
  EXPECT_NE(RecordingFromJson(std::string(100000, '[') + std::string(100000, ']'))
                .status()
                .message()
                .find("limit is 64"),
            std::string::npos);
  const std::string good = RecordingToJson(SyntheticRecording());
  std::string no_context = good;
  no_context.replace(no_context.find("\"context\""), 9, "\"contxt\"");
  absl::Status s = RecordingFromJson(no_context).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("context"), std::string::npos) << s;
  // A value of the wrong type names the field it is in (it was the JSON library's bare text).
  nlohmann::json null_context = nlohmann::json::parse(good);
  null_context["context"] = nullptr;
  s = RecordingFromJson(null_context.dump()).status();
  EXPECT_EQ(s.message(), "recording: \"context\": cannot use at() with null") << s;
  std::string version = good;
  version.replace(version.find("\"version\":1"), 11, "\"version\":7");
  EXPECT_NE(RecordingFromJson(version).status().message().find("version"), std::string::npos);

  Recording backwards = SyntheticRecording();
  std::swap(backwards.input.steps[5], backwards.input.steps[6]);
  s = RecordingFromJson(RecordingToJson(backwards)).status();
  EXPECT_NE(s.message().find("out of order"), std::string::npos) << s;

  // Element sizes the cost model does not know are refused by name (it costs 2 and 4 bytes).
  for (double bytes : {0.0, 1.0, 3.0, 8.0}) {
    Recording odd = SyntheticRecording();
    odd.input.context.dtype_bytes = bytes;
    s = RecordingFromJson(RecordingToJson(odd)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bytes;
    EXPECT_NE(s.message().find("context.dtype_bytes"), std::string::npos) << s;
  }
  Recording kv = SyntheticRecording();
  kv.input.context.kv_dtype_bytes = 8;
  s = RecordingFromJson(RecordingToJson(kv)).status();
  EXPECT_NE(s.message().find("context.kv_dtype_bytes"), std::string::npos) << s;
  kv.input.context.kv_dtype_bytes = 0;  // the compute dtype's: accepted
  EXPECT_TRUE(RecordingFromJson(RecordingToJson(kv)).ok());
}

// A live CPU engine under load: the report the server's session makes from its capture, and
// the one an offline session makes from that capture's JSON, are the same report.
TEST(RecordingTest, LiveCaptureJudgedOfflineGivesTheServersReport) {
  EngineConfig cfg;
  cfg.model = "tiny";
  cfg.backend = "cpu";
  cfg.num_threads = 1;
  cfg.max_model_len = 256;
  cfg.max_num_seqs_limit = 8;
  cfg.options.max_num_seqs = 2;
  cfg.options.max_num_batched_tokens = 64;  // a short probe reaches decode batches
  auto engine = Engine::Create(cfg);
  ASSERT_TRUE(engine.ok()) << engine.status();
  DiagnosticsSession live("test");
  CalibrationSource source;
  source.quick = true;
  source.probe_ms = 400;
  ASSERT_TRUE(live.Start(engine->get(), source).ok());

  const double t0 = NowUs();
  std::vector<std::unique_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r;
    for (int j = 0; j < 12; ++j) r.prompt.push_back(3 + (i * 31 + j * 7) % 250);
    r.sampling.max_tokens = 40;
    r.sampling.ignore_eos = true;
    auto s = RequestStream::Open(engine->get(), r);
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(std::move(*s));
  }
  for (auto& s : streams) s->Drain(nullptr);
  const WindowInput input = live.Capture(**engine, t0, NowUs());
  ASSERT_GT(input.steps.size(), 50u);
  for (const StepRecord& r : input.steps) EXPECT_TRUE(r.ops.empty());  // traces only
  const DiagnosticsReport server = live.BuildReport(input);

  Recording rec;
  rec.input = input;
  rec.calibration = *live.calibration();
  absl::StatusOr<Recording> back = RecordingFromJson(RecordingToJson(rec));
  ASSERT_TRUE(back.ok()) << back.status();
  DiagnosticsSession offline("test");
  offline.StartOffline(back->calibration);
  ExpectSameReport(server, offline.BuildReport(back->input));
  // The probe travelled too.
  EXPECT_FALSE(back->input.context.probe_curve.decode.empty() &&
               back->input.context.probe_curve.prefill.empty());
}

// A CPU server decoding one stream with bf16 weights: its recording, read back and judged
// offline, still gets the quantize action, the same figures; once quantized (a recording with
// q8_0 weights) it reads back and gets none.
TEST(RecordingTest, QuantizeActionSurvivesTheRoundTrip) {
  for (double bytes : {2.0, 34.0 / 32}) {
    SCOPED_TRACE(bytes);
    StepSpec s;
    s.seqs = 1;
    s.max_num_seqs = 1;
    s.weight_dtype_bytes = bytes;
    Recording rec;
    rec.calibration = testing_diag::TestCalibration();
    rec.input.steps = testing_diag::Steps(testing_diag::Small(), TrueModel{}, s, 20);
    rec.input.begin_us = rec.input.steps.front().start_us;
    rec.input.end_us = rec.input.steps.back().end_us;
    rec.input.ring_total_steps = 20;
    rec.input.ring_capacity = 4096;
    rec.input.context = testing_diag::TestContext(testing_diag::Small(), 1);
    rec.input.context.max_num_seqs_limit = 1;
    rec.input.context.weight_dtype_bytes = bytes;
    rec.input.context.weight_bytes = 2e8;
    absl::StatusOr<Recording> back = RecordingFromJson(RecordingToJson(rec));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->input.context.weight_dtype_bytes, bytes);
    DiagnosticsSession a("test"), b("test");
    a.StartOffline(rec.calibration);
    b.StartOffline(back->calibration);
    const DiagnosticsReport ra = a.BuildReport(rec.input);
    const DiagnosticsReport rb = b.BuildReport(back->input);
    ExpectSameReport(ra, rb);
    const bool quantize =
        !rb.plan.actions.empty() && rb.plan.actions.front().kind == ActionKind::kQuantizeWeights;
    EXPECT_EQ(quantize, bytes == 2.0) << rb.plan.note;
  }
}

}  // namespace
}  // namespace saturn
