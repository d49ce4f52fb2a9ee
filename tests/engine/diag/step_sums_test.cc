// Windows longer than the step ring's records: the ring folds the records it evicts into
// per-second sums (StepSums), and a report's profile and verdict over records + sums equal
// those over every record; the sums and records never hold the same step; only the newest
// kSumSeconds seconds are kept, and a window reaching past them is cut and says so.
#include "engine/measure/step_sums.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/diag/diagnostics_session.h"
#include "engine/diag/recording.h"
#include "engine/measure/step_record.h"
#include "tests/engine/diag/synthetic.h"

namespace saturn {
namespace {

using testing_diag::MakeStep;
using testing_diag::StepSpec;
using testing_diag::TrueModel;

// About 6 s of serving (a tiny model): decode at batches 1-12 and contexts that grow, a prefill
// after an idle wait every 40 steps, some steps replayed from a graph (with padding), some untimed,
// some with the scheduler's contention figures.
std::vector<StepRecord> MixedSteps(bool decode_only) {
  std::vector<StepRecord> v;
  const ModelConfig m = testing_diag::Micro();
  TrueModel t;
  t.host_us = 300;
  double at = 250'000;  // not on a second's edge
  for (int i = 0; i < 6000; ++i) {
    StepSpec s;
    s.seqs = 1 + i % 12;
    s.context = 50 + (i % 300);
    s.queue_depth = i % 5;
    const bool prefill = !decode_only && i % 40 == 0;
    if (prefill) {
      s.prefill_tokens = 64;
      at += 20'000;  // waited for a request
    }
    StepRecord r = MakeStep(m, t, s, at, i);
    r.per_op_timed = i % 9 != 0;
    if (!prefill && i % 3 == 0) {
      r.graph_replayed = true;
      r.replayed_ops = r.op_count - 2;
      r.graph_batch_size = s.seqs + 1;
      r.padding_tokens = 1;
    }
    if (i % 2 == 0) {
      r.sched_known = true;
      r.sched_run_us = r.wall_us() * 0.9;
      r.sched_wait_us = r.wall_us() * 0.05;
    }
    r.device_busy_us = r.wall_us() * (i % 4 == 0 ? 1.2 : 0.8);  // some over the wall
    r.num_preempted = i % 97 == 0 ? 1 : 0;
    v.push_back(r);
    at = r.end_us + 15 + (i % 7) * 30;  // the loop's own gaps
  }
  return v;
}

struct Split {
  std::vector<StepRecord> records;  // what the ring keeps from the window's start
  EvictedSums earlier;
  std::vector<StepRecord> all;  // every step from the window's start
};

// Pushes `steps` through a ring keeping `capacity` records and asks for the window from
// `since_us` as a report does.
Split Through(const std::vector<StepRecord>& steps, size_t capacity, double since_us) {
  StepRing ring(capacity, 16);
  for (const StepRecord& r : steps) ring.Push(r);
  Split s;
  s.records = ring.WindowWithEvicted(since_us, 1e12, 0, &s.earlier);
  const double from = s.earlier.sums.steps > 0 ? s.earlier.begin_us : since_us;
  for (const StepRecord& r : steps) {
    if (r.start_us >= from) s.all.push_back(r);
  }
  return s;
}

void ExpectNear(double a, double b, const char* what) {
  EXPECT_NEAR(a, b, 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)})) << what;
}

TEST(StepSumsTest, RecordsAndEvictedSumsHoldEachStepOnce) {
  const std::vector<StepRecord> steps = MixedSteps(false);
  EXPECT_GT(steps.back().end_us, 5e6);  // several seconds of sums
  for (const double since : {0.0, 900'000.0, 1'000'000.0, 2'400'000.0}) {
    const Split s = Through(steps, 300, since);
    ASSERT_GT(s.earlier.sums.steps, 0) << since;
    EXPECT_TRUE(s.earlier.complete);
    // The sums begin at the first whole second at or after the window's start.
    EXPECT_EQ(s.earlier.begin_us, std::ceil(since / 1e6) * 1e6);
    EXPECT_EQ(s.records.size(), 300u);
    EXPECT_EQ(s.earlier.sums.steps + int64_t(s.records.size()), int64_t(s.all.size())) << since;
    EXPECT_GE(s.earlier.sums.first_start_us, s.earlier.begin_us);
    EXPECT_LT(s.earlier.sums.last_end_us, s.records.front().end_us);
    EXPECT_EQ(s.earlier.sums.last_end_us, s.all[s.all.size() - 301].end_us);
  }
  // A window wholly in the past (an evicted step ends after it): no sums, which could not be
  // cut at its end.
  EvictedSums past;
  {
    StepRing ring(300, 16);
    for (const StepRecord& r : steps) ring.Push(r);
    (void)ring.WindowWithEvicted(1e6, 2e6, 0, &past);
  }
  EXPECT_EQ(past.sums.steps, 0);
  // A window starting on a whole second: the session uses the sums from exactly there.
  {
    StepRing ring(300, 16);
    for (const StepRecord& r : steps) ring.Push(r);
    WindowInput in;
    in.begin_us = 2e6;
    in.end_us = steps.back().end_us + 10;
    in.steps = ring.WindowWithEvicted(in.begin_us, in.end_us, 8, &in.earlier);
    in.ring_total_steps = ring.total_steps();
    in.ring_capacity = ring.capacity();
    in.context = testing_diag::TestContext(testing_diag::Micro(), 16);
    DiagnosticsSession session("test");
    session.StartOffline(testing_diag::TestCalibration());
    const DiagnosticsReport r = session.BuildReport(in);
    EXPECT_EQ(r.window_begin_us, 2e6);
    EXPECT_GT(r.profile.summed_steps, 0);
    const auto from_2s = std::count_if(steps.begin(), steps.end(),
                                       [](const StepRecord& x) { return x.start_us >= 2e6; });
    EXPECT_EQ(r.profile.steps, int(from_2s));
  }
  // A window the records reach back to needs no sums.
  const Split recent = Through(steps, 300, steps[steps.size() - 100].start_us);
  EXPECT_EQ(recent.earlier.sums.steps, 0);
  EXPECT_EQ(recent.records.size(), 100u);
}

TEST(StepSumsTest, ProfileOverRecordsAndSumsEqualsProfileOverEveryRecord) {
  const std::vector<StepRecord> steps = MixedSteps(false);
  const Split s = Through(steps, 250, 1'300'000);
  ASSERT_GT(s.earlier.sums.steps, 1000);
  const Calibration cal = testing_diag::TestCalibration();
  AnalyzerContext plain = testing_diag::TestContext(testing_diag::Micro(), 16);
  AnalyzerContext summed = plain;
  summed.earlier = s.earlier.sums;
  const double begin = s.earlier.begin_us, end = steps.back().end_us + 100;
  const Profile a = ComputeProfile(s.records, begin, end, cal, summed);
  const Profile b = ComputeProfile(s.all, begin, end, cal, plain);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.summed_steps, s.earlier.sums.steps);
  EXPECT_EQ(b.summed_steps, 0);
  EXPECT_EQ(a.max_queue_depth, b.max_queue_depth);
  EXPECT_EQ(a.preemptions, b.preemptions);
  EXPECT_GT(a.preemptions, 0);
  ExpectNear(a.loop_gap_us, b.loop_gap_us, "loop_gap_us");
  EXPECT_GT(a.loop_gap_us, 0);
  ExpectNear(a.idle_share, b.idle_share, "idle_share");
  EXPECT_GT(a.idle_share, 0.01);  // the waits before prefills are idle, not loop gaps
  ExpectNear(a.busy_fraction, b.busy_fraction, "busy_fraction");
  ExpectNear(a.host_share, b.host_share, "host_share");
  ExpectNear(a.launch_share, b.launch_share, "launch_share");
  ExpectNear(a.tokens_per_s, b.tokens_per_s, "tokens_per_s");
  ExpectNear(a.output_tokens_per_s, b.output_tokens_per_s, "output_tokens_per_s");
  // The plan's bases: tokens per second of the steps, idle left out, so above the span's rate.
  ExpectNear(a.decode_step_tokens_per_s, b.decode_step_tokens_per_s, "decode_step_tokens_per_s");
  ExpectNear(a.decoding_step_tokens_per_s, b.decoding_step_tokens_per_s,
             "decoding_step_tokens_per_s");
  EXPECT_GT(a.decoding_step_tokens_per_s, a.output_tokens_per_s);
  EXPECT_GT(a.decode_step_tokens_per_s, 0);
  ExpectNear(a.mean_batch_seqs, b.mean_batch_seqs, "mean_batch_seqs");
  ExpectNear(a.mean_decode_step_ms, b.mean_decode_step_ms, "mean_decode_step_ms");
  ExpectNear(a.mean_context, b.mean_context, "mean_context");
  ExpectNear(a.mfu, b.mfu, "mfu");
  ExpectNear(a.mbu, b.mbu, "mbu");
  ExpectNear(a.kv_usage, b.kv_usage, "kv_usage");
  ExpectNear(a.kv_usage_max, b.kv_usage_max, "kv_usage_max");
  ExpectNear(a.mean_queue_depth, b.mean_queue_depth, "mean_queue_depth");
  ExpectNear(a.graph_hit_rate, b.graph_hit_rate, "graph_hit_rate");
  EXPECT_GT(a.graph_hit_rate, 0.2);
  ExpectNear(a.padding_waste, b.padding_waste, "padding_waste");
  ASSERT_EQ(a.classes.size(), b.classes.size());
  for (size_t c = 0; c < a.classes.size(); ++c) {
    ExpectNear(a.classes[c].time_us, b.classes[c].time_us, "class time_us");
    ExpectNear(a.classes[c].roofline_efficiency, b.classes[c].roofline_efficiency, "class eff");
    EXPECT_EQ(a.classes[c].ops_per_step, b.classes[c].ops_per_step);
  }

  // The verdict: the same class and signals; the roofline floor of summed steps is taken per
  // op class over their sums, at most the per-step floors' sum, so the overhead over it reads
  // at least as high.
  const Verdict va = Classify(s.records, a, cal, summed, {});
  const Verdict vb = Classify(s.all, b, cal, plain, {});
  EXPECT_EQ(va.bottleneck, vb.bottleneck);
  EXPECT_EQ(va.step_bound, vb.step_bound);
  ExpectNear(va.run_share, vb.run_share, "run_share");
  EXPECT_LT(va.run_share, 1.0);
  ExpectNear(va.host_per_step.prepare_us, vb.host_per_step.prepare_us, "prepare per step");
  ASSERT_EQ(va.signals.size(), vb.signals.size());
  for (size_t i = 0; i < va.signals.size(); ++i) {
    EXPECT_EQ(va.signals[i].name, vb.signals[i].name);
    if (va.signals[i].name == "overhead_vs_roofline_floor") {
      EXPECT_GE(va.signals[i].value, vb.signals[i].value * (1 - 1e-9));
    } else {
      ExpectNear(va.signals[i].value, vb.signals[i].value, va.signals[i].name.c_str());
    }
  }
}

TEST(StepSumsTest, DecodeOnlyVerdictOverSumsEqualsTheRecords) {
  const std::vector<StepRecord> steps = MixedSteps(true);
  const Split s = Through(steps, 100, 0);
  const Calibration cal = testing_diag::TestCalibration();
  AnalyzerContext plain = testing_diag::TestContext(testing_diag::Micro(), 16);
  AnalyzerContext summed = plain;
  summed.earlier = s.earlier.sums;
  const double begin = s.earlier.begin_us, end = steps.back().end_us;
  const Profile a = ComputeProfile(s.records, begin, end, cal, summed);
  const Profile b = ComputeProfile(s.all, begin, end, cal, plain);
  const Verdict va = Classify(s.records, a, cal, summed, {});
  const Verdict vb = Classify(s.all, b, cal, plain, {});
  EXPECT_EQ(va.summary, vb.summary);
  ASSERT_EQ(va.signals.size(), vb.signals.size());
  for (size_t i = 0; i < va.signals.size(); ++i) {
    // Decode steps of one model keep each class's intensity: the summed floor is exact.
    EXPECT_NEAR(va.signals[i].value, vb.signals[i].value, 1e-6 * std::fabs(vb.signals[i].value))
        << va.signals[i].name;
  }
}

TEST(StepSumsTest, OnlyTheNewestSecondsAreKeptAndAWindowPastThemSaysSo) {
  StepRing ring(10, 4);
  const int n = int(StepRing::kSumSeconds) + 110;
  for (int i = 0; i < n; ++i) {  // one step a second
    StepRecord r;
    r.step_id = i;
    r.start_us = i * 1e6 + 10;
    r.end_us = r.start_us + 500;
    r.num_seqs = r.num_decode_tokens = r.num_sampled = 1;
    ring.Push(r);
  }
  EvictedSums earlier;
  const std::vector<StepRecord> records = ring.WindowWithEvicted(0, 1e12, 0, &earlier);
  // Evicted: steps 0 .. n-11; kept as sums: the newest kSumSeconds of them.
  EXPECT_FALSE(earlier.complete);
  EXPECT_EQ(earlier.sums.steps, int64_t(StepRing::kSumSeconds));
  EXPECT_EQ(earlier.begin_us, double(n - 10 - StepRing::kSumSeconds) * 1e6);
  EXPECT_EQ(records.size(), 10u);

  // The session reports the cut: the window covers from the oldest second kept.
  WindowInput in;
  in.begin_us = 0;
  in.end_us = n * 1e6;
  in.steps = records;
  in.earlier = earlier;
  in.ring_total_steps = n;
  in.ring_capacity = 10;
  in.context = testing_diag::TestContext(testing_diag::Small(), 4);
  DiagnosticsSession session("test");
  session.StartOffline(testing_diag::TestCalibration());
  const DiagnosticsReport r = session.BuildReport(in);
  EXPECT_EQ(r.window_begin_us, earlier.begin_us);
  EXPECT_EQ(r.profile.steps, int(StepRing::kSumSeconds) + 10);
  EXPECT_EQ(r.profile.summed_steps, int(StepRing::kSumSeconds));
  EXPECT_NE(r.verdict.window_note.find("per-second sums"), std::string::npos)
      << r.verdict.window_note;
  EXPECT_NE(r.verdict.window_note.find("of the " + std::to_string(n) +
                                       ".0 s asked (the per-second sums reach back"),
            std::string::npos)
      << r.verdict.window_note;
}

TEST(StepSumsTest, ARecordingCarriesTheSumsAndJudgesTheSame) {
  const std::vector<StepRecord> steps = MixedSteps(false);
  StepRing ring(200, 16);
  for (const StepRecord& r : steps) ring.Push(r);
  Recording rec;
  rec.calibration = testing_diag::TestCalibration();
  rec.input.begin_us = 700'000;
  rec.input.end_us = steps.back().end_us + 10;
  rec.input.steps =
      ring.WindowWithEvicted(rec.input.begin_us, rec.input.end_us, 8, &rec.input.earlier);
  rec.input.ring_total_steps = ring.total_steps();
  rec.input.ring_capacity = ring.capacity();
  rec.input.context = testing_diag::TestContext(testing_diag::Micro(), 16);
  absl::StatusOr<Recording> back = RecordingFromJson(RecordingToJson(rec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->input.earlier.sums.steps, rec.input.earlier.sums.steps);
  EXPECT_EQ(back->input.earlier.begin_us, 1e6);
  EXPECT_EQ(back->input.earlier.sums.by_class[0].timed_flops,
            rec.input.earlier.sums.by_class[0].timed_flops);
  DiagnosticsSession a("test"), b("test");
  a.StartOffline(rec.calibration);
  b.StartOffline(back->calibration);
  const DiagnosticsReport ra = a.BuildReport(rec.input);
  const DiagnosticsReport rb = b.BuildReport(back->input);
  EXPECT_EQ(ra.window_begin_us, 1e6);
  const auto before_1s = std::count_if(steps.begin(), steps.end(),
                                       [](const StepRecord& r) { return r.start_us < 1e6; });
  EXPECT_EQ(ra.profile.steps, int(steps.size() - before_1s));
  EXPECT_EQ(ra.profile.summed_steps, int(rec.input.earlier.sums.steps));
  EXPECT_EQ(ra.verdict.summary, rb.verdict.summary);
  EXPECT_EQ(ra.verdict.window_note, rb.verdict.window_note);
  EXPECT_EQ(ra.profile.busy_fraction, rb.profile.busy_fraction);
  EXPECT_EQ(ra.plan.note, rb.plan.note);

  // A recording without sums (written before the ring kept them) still reads.
  std::string old = RecordingToJson(rec);
  const size_t at = old.find("\"earlier\":");
  ASSERT_NE(at, std::string::npos);
  old.replace(at, 10, "\"earlierX\":");
  absl::StatusOr<Recording> legacy = RecordingFromJson(old);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->input.earlier.sums.steps, 0);
  // A malformed one names the field.
  std::string bad = RecordingToJson(rec);
  bad.replace(bad.find("\"issued_ops\":"), 13, "\"issued_opz\":");
  const absl::Status s = RecordingFromJson(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("issued_ops"), std::string::npos) << s;
}

}  // namespace
}  // namespace saturn
