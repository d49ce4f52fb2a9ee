// saturn-bench-plan: follows the diagnostics plan on a live in-process engine and reports how
// far its prediction was from what happened. Start at a small max_num_seqs under a closed loop
// of --concurrency clients (each sends its next request when the previous one finishes),
// diagnose a steady window, apply the plan's top action with Engine::UpdateOptions (what
// UpdateEngineOptions does), let it settle, measure, and print predicted vs measured decode
// tokens/s and TPOT with the errors (the server's own DiagnosticsSession,
// engine/diag/diagnostics_session.h, tracks it). A client-side
// action (raise client concurrency) is followed too: the load restarts at the planned number of
// clients; so is a restart action (quantize_weights): a new engine with the action's flag
// serves the same load, and its decode rate is compared with the prediction. Output tokens/s over
// the after window is compared with the plan's prediction, which is output tokens/s of the request
// mix when the window held prefill (step_curve.h). Before the load, synthetic probe steps are timed
// (Engine::ProbeSteps, as the server does at start with --probe_steps_ms). Request lengths vary
// around their means (--length_jitter) so the clients do not run in lockstep, and after the change
// the after window starts only once as many requests finished as clients run (--ramp_s), i.e. in
// steady state. With --return_s the run is A-B-A: the options and clients before the change are
// restored and that load is measured again, so the machine's own drift over the run (a shared
// host's bandwidth moves by tens of percent within a minute) is measured on the same load, not
// guessed.
//
//   saturn-bench-plan --model=small --start_seqs=1 --concurrency=8 --json=plan.json
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "engine/diag/analyzer.h"
#include "engine/diag/diagnostics_session.h"
#include "engine/engine.h"
#include "engine/engine_flags.h"
#include "engine/measure/calibration.h"
#include "kernels/base/status_macros.h"
#include "proto/render/report_json.h"
#include "proto/render/report_proto.h"
#include "proto/render/report_text.h"

// Besides the engine's flags (--model, --backend, ...: engine/engine_flags.h; here --backend
// defaults to cpu, see main):
ABSL_FLAG(int, start_seqs, 1, "max_num_seqs before the plan");
ABSL_FLAG(int, seqs_limit, 64,
          "the engine's max_num_seqs_limit (what no plan may raise max_num_seqs past)");
ABSL_FLAG(std::string, follow, "top",
          "the plan action to follow: top, or an action kind (raise_max_num_seqs, "
          "raise_client_concurrency, quantize_weights, ...)");
ABSL_FLAG(int, concurrency, 8, "closed-loop clients (fewer than --start_seqs: a client-side plan)");
ABSL_FLAG(int, prompt_len, 16, "prompt tokens per request");
ABSL_FLAG(int, max_tokens, 64, "tokens generated per request");
ABSL_FLAG(double, length_jitter, 0.5,
          "prompt and output lengths vary uniformly in [L(1-j), L(1+j)] per request (mean L), so "
          "closed-loop clients do not run in lockstep (0: every request alike)");
ABSL_FLAG(double, before_s, 4, "seconds of load diagnosed before the change");
ABSL_FLAG(double, after_s, 6, "seconds of load measured after the change");
ABSL_FLAG(double, ramp_s, -1,
          "seconds between restarting the load at the planned concurrency and the after window "
          "(client-side actions); -1: until as many requests finished as clients run (at most "
          "30 s), so the after window sees steady state, not the new clients' first prefills");
ABSL_FLAG(double, probe_ms, saturn::kDefaultProbeBudgetMs,
          "time budget of the synthetic probe steps after calibration (0: none, as a server "
          "with --probe_steps_ms=0)");
ABSL_FLAG(bool, probe_after, true,
          "probe again once the after window's load stopped: probed vs served step times at the "
          "same moment separate machine load from what serving itself adds");
ABSL_FLAG(double, return_s, 0,
          "then go back to the options and clients before the change and measure that load again "
          "for this many seconds (0: do not): an A-B-A run, whose two A windows show how far the "
          "machine itself moved while B ran");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");

namespace saturn {
namespace {

constexpr char kUsage[] =
    "saturn-bench-plan: follows the diagnostics plan in-process and reports predicted vs "
    "measured (--backend: cpu unless set)";

// Length `mean` varied uniformly by +-jitter for the m-th request of the load (client i's k-th
// of n clients: m = k n + i), field f (1: prompt, 2: output). Weyl sequences (m times an
// irrational, mod 1; the golden ratio for prompts, sqrt 2 for outputs) spread any run of
// consecutive requests evenly over the range, so the few dozen requests of the window diagnosed
// before a change have the workload's mean lengths, as the window measured after it does (a
// hash had given the first three rounds' prompts 4-11 % below the mean, and every server-side
// plan saw that shorter mix).
int Jittered(int mean, double jitter, int64_t m, int f) {
  const double step = f == 1 ? 0.6180339887498949 : 0.4142135623730950;
  const double u = std::fmod(0.5 + double(m) * step, 1.0);  // [0, 1)
  return std::max(1, int(std::lround(mean * (1 + jitter * (2 * u - 1)))));
}

// `n` clients, each running one request at a time until Stop().
class ClosedLoop {
 public:
  ClosedLoop(Engine* engine, int n, int prompt_len, int max_tokens, double jitter) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, engine, n, i, prompt_len, max_tokens, jitter] {
        for (int k = 0; !stop_.load(); ++k) {
          const int64_t m = int64_t(k) * n + i;
          const GenerateRequest r =
              bench::SyntheticRequest(i * 131 + k * 7, 1, Jittered(prompt_len, jitter, m, 1),
                                      Jittered(max_tokens, jitter, m, 2));
          auto s = RequestStream::Open(engine, r);
          if (!s.ok()) {
            std::cerr << "request: " << s.status() << "\n";
            return;
          }
          (*s)->Drain(nullptr);
          ++finished_;
        }
      });
    }
  }
  ~ClosedLoop() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int finished() const { return finished_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> finished_{0};
  std::vector<std::thread> threads_;
};

// A probe's series: [prefill?, rows, median us, samples, decode after prefill?, context] each.
nlohmann::json ProbeJson(const std::optional<StepProbe>& p) {
  nlohmann::json out = nlohmann::json::array();
  if (!p.has_value()) return out;
  for (const ProbeSeries& s : p->series) {
    std::vector<double> v = s.wall_us;
    std::sort(v.begin(), v.end());
    out.push_back({s.prefill, s.rows, v.empty() ? 0.0 : v[v.size() / 2], v.size(), s.after_prefill,
                   s.context});
  }
  return out;
}

// The machine's own drift over the run: each shape probed both before the load and after it,
// after / before (median times). Empty when either probe is missing or they share no shape.
std::vector<double> ProbeRatios(const std::optional<StepProbe>& before,
                                const std::optional<StepProbe>& after) {
  std::vector<double> out;
  if (!before.has_value() || !after.has_value()) return out;
  const nlohmann::json b = ProbeJson(before), a = ProbeJson(after);
  for (const auto& x : b) {
    for (const auto& y : a) {
      if (x[0] == y[0] && x[1] == y[1] && x[4] == y[4] && x[5] == y[5] && x[2].get<double>() > 0) {
        out.push_back(y[2].get<double>() / x[2].get<double>());
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// /proc/loadavg's first three figures (the machine's load; empty where unreadable).
std::string LoadAvg() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "";
  double a = 0, b = 0, c = 0;
  const int n = std::fscanf(f, "%lf %lf %lf", &a, &b, &c);
  std::fclose(f);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", a, b, c);
  return n == 3 ? buf : "";
}

void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Waits --ramp_s, or (-1) until as many requests finished as `clients` run (at most 30 s):
// requests queued by a change, or new clients, all start at once; once every client is past
// one request on average, arrivals have spread out. Returns the seconds it waited.
double Ramp(const ClosedLoop& load, int clients) {
  const double ramp = absl::GetFlag(FLAGS_ramp_s), r0 = NowUs();
  const int f0 = load.finished();
  if (ramp >= 0) {
    Sleep(ramp);
  } else {
    while (load.finished() - f0 < clients && NowUs() - r0 < 30e6) Sleep(0.05);
  }
  return (NowUs() - r0) * 1e-6;
}

// The request-mix prediction's parts against the after window's steps, part by part: which
// of them carries the plan's error (fewer tokens per step, slower decode or mixed steps, more
// steps carrying prefill). Pairs [predicted, measured]; empty without a mix prediction.
nlohmann::json MixParts(const MixPrediction& m, const std::vector<StepRecord>& steps) {
  nlohmann::json out = nlohmann::json::object();
  if (m.output_tokens_per_step <= 0) return out;
  double n = 0, mixed = 0, dec_wall = 0, dec_n = 0, mix_wall = 0, mix_rows = 0, sampled = 0,
         decode_rows = 0, dec_after_n = 0, dec_after_wall = 0, dec_wait = 0, dec_host = 0;
  bool prev_prefill = false;
  for (const StepRecord& r : steps) {
    if (r.num_prefill_tokens + r.num_decode_tokens == 0) continue;
    const bool after_prefill = prev_prefill;
    prev_prefill = r.num_prefill_tokens > 0;
    ++n;
    sampled += r.num_sampled;
    decode_rows += r.num_decode_tokens;
    if (r.num_prefill_tokens > 0) {
      ++mixed;
      mix_wall += r.wall_us();
      mix_rows += r.num_prefill_tokens + r.num_decode_tokens;
    } else {
      ++dec_n;
      dec_wall += r.wall_us();
      if (after_prefill) ++dec_after_n, dec_after_wall += r.wall_us();
      dec_wait += r.sched_wait_us;
      dec_host += r.schedule_us + r.prepare_us + r.postprocess_us;
    }
  }
  if (n == 0) return out;
  auto mean = [](double sum, double count) { return count > 0 ? sum / count : 0.0; };
  out["steps_with_prefill"] = {m.prefill_step_fraction, mixed / n};
  out["decode_rows_per_step"] = {m.decode_batch, decode_rows / n};
  out["output_tokens_per_step"] = {m.output_tokens_per_step, sampled / n};
  out["decode_step_us"] = {m.decode_step_us, mean(dec_wall, dec_n)};
  // Measured only: decode steps right after a step carrying prefill, and the others.
  out["decode_after_prefill_share"] = {0.0, mean(dec_after_n, dec_n)};
  out["decode_after_prefill_us"] = {0.0, mean(dec_after_wall, dec_after_n)};
  out["decode_after_decode_us"] = {0.0, mean(dec_wall - dec_after_wall, dec_n - dec_after_n)};
  // Measured only: what a decode step spent off the runner (host phases) and with its threads
  // runnable but off a core (schedstat: other threads, the clients' included, held them).
  out["decode_host_us"] = {0.0, mean(dec_host, dec_n)};
  out["decode_sched_wait_us"] = {0.0, mean(dec_wait, dec_n)};
  out["mixed_step_us"] = {m.mixed_step_us, mean(mix_wall, mixed)};
  out["mixed_step_rows"] = {m.mixed_rows, mean(mix_rows, mixed)};
  out["mean_step_us"] = {m.tpot_ms * 1e3, mean(dec_wall + mix_wall, n)};
  return out;
}

// Steps carrying prefill, per op class: mean timed microseconds per step, with their mean rows
// and decode rows (where a mixed step's time went, before and after the change).
nlohmann::json MixedByClass(const std::vector<StepRecord>& steps) {
  std::array<double, kNumOpClasses> us{};
  double n = 0, rows = 0, decodes = 0, wall = 0;
  for (const StepRecord& r : steps) {
    if (r.num_prefill_tokens == 0 || !r.per_op_timed) continue;
    ++n;
    rows += r.num_prefill_tokens + r.num_decode_tokens;
    decodes += r.num_decode_tokens;
    wall += r.wall_us();
    for (size_t c = 0; c < kNumOpClasses; ++c) us[c] += r.by_class[c].device_us;
  }
  nlohmann::json out = nlohmann::json::object();
  if (n == 0) return out;
  out["steps"] = n;
  out["rows"] = rows / n;
  out["decode_rows"] = decodes / n;
  out["wall_us"] = wall / n;
  for (size_t c = 0; c < kNumOpClasses; ++c) out[OpClassName(OpClass(c))] = us[c] / n;
  return out;
}

// Decode tokens/s of the window's decode-only steps: their tokens over their wall time (what a
// plan without prefill in its window predicts: batch over step time).
double DecodeStepTokensPerS(const std::vector<StepRecord>& steps) {
  double tokens = 0, us = 0;
  for (const StepRecord& r : steps) {
    if (r.num_prefill_tokens > 0 || r.num_decode_tokens == 0) continue;
    tokens += r.num_decode_tokens;
    us += r.wall_us();
  }
  return us > 0 ? tokens / us * 1e6 : 0;
}

// One engine of `cfg` under n closed-loop clients, diagnosed by its own session over a steady
// window of `seconds`: what a restarted server serves (calibration, probe, load, ramp).
struct Served {
  DiagnosticsReport report;
  std::vector<StepRecord> steps;
  std::string device;
};
absl::StatusOr<Served> ServeWindow(const EngineConfig& cfg, int n, double seconds) {
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(cfg));
  DiagnosticsSession session("saturn-bench-plan");
  CalibrationSource source;
  source.probe_ms = absl::GetFlag(FLAGS_probe_ms);
  RETURN_IF_ERROR(session.Start(engine.get(), source));
  ClosedLoop load(engine.get(), n, absl::GetFlag(FLAGS_prompt_len), absl::GetFlag(FLAGS_max_tokens),
                  absl::GetFlag(FLAGS_length_jitter));
  Ramp(load, n);
  const double t0 = NowUs();
  Sleep(seconds);
  Served out;
  out.report = session.BuildReport(*engine, t0, NowUs(), &out.steps);
  out.device = engine->info().device_name;
  load.Stop();
  return out;
}

// A restart action (quantize_weights): the engine of `cfg` is gone. Its prediction starts from
// the plan's state before it (the earlier actions' options, in a.options_after, and `clients`),
// so that state is served first (B0), then the same with the action's flag (B1), then, with
// --return_s, B0 again (the machine's own move over the run: B0-B1-B0). The action's own
// prediction is the ratio tokens_per_s_after / tokens_per_s_before, compared with B1 / B0;
// the absolute prediction (which carries the earlier actions' errors) with B1.
int FollowRestart(const EngineConfig& cfg, const Action& a, const DiagnosticsReport& before, int n,
                  int clients, const Calibration& cal, const std::string& load_start) {
  const std::string kFlag = "--quantization ";
  if (!absl::StartsWith(a.restart_flags, kFlag)) {
    std::printf("action \"%s\" needs a restart with %s, which this tool does not follow\n",
                a.what.c_str(), a.restart_flags.c_str());
    return 1;
  }
  EngineConfig prior_cfg = cfg;
  prior_cfg.options = a.options_after;  // what the earlier actions set (this one sets none)
  EngineConfig after_cfg = prior_cfg;
  after_cfg.quantization = a.restart_flags.substr(kFlag.size());
  after_cfg.dtype = "auto";
  const bool mix = a.prefill_share > 0;
  auto serve = [&](const EngineConfig& c, double seconds, const char* what, Served* out) -> double {
    std::cerr << what << " (" << clients << " clients) ...\n";
    absl::StatusOr<Served> s = ServeWindow(c, clients, seconds);
    if (!s.ok()) {
      std::cerr << what << ": " << s.status() << "\n";
      return -1;
    }
    *out = std::move(*s);
    return mix ? out->report.profile.output_tokens_per_s : DecodeStepTokensPerS(out->steps);
  };
  Served b0, b1, back;
  const double m0 =
      serve(prior_cfg, absl::GetFlag(FLAGS_before_s), "the plan's state before it", &b0);
  if (m0 < 0) return 1;
  const double m1 = serve(after_cfg, absl::GetFlag(FLAGS_after_s), a.restart_flags.c_str(), &b1);
  if (m1 < 0) return 1;
  double m2 = 0;
  if (const double back_s = absl::GetFlag(FLAGS_return_s); back_s > 0) {
    m2 = serve(prior_cfg, back_s, "the plan's state before it, again", &back);
    if (m2 < 0) return 1;
  }
  const double b0_mean = m2 > 0 ? (m0 + m2) / 2 : m0;  // B0 at B1's time, where measured twice
  const double predicted_ratio = a.tokens_per_s_after / std::max(1e-9, a.tokens_per_s_before);
  const double measured_ratio = m1 / std::max(1e-9, b0_mean);
  const double ratio_error = predicted_ratio / std::max(1e-9, measured_ratio) - 1;
  const double plan_error = a.tokens_per_s_after / std::max(1e-9, m1) - 1;
  std::printf("--- after the restart with %s (%s) ---\n%s", a.restart_flags.c_str(),
              b1.device.c_str(), RenderReport(ToProto(b1.report)).c_str());
  const char* unit = mix ? "output tokens/s" : "decode tokens/s";
  std::printf("\n%d clients, max_num_seqs %d, the earlier actions' options; %s\n", clients,
              a.options_after.max_num_seqs, unit);
  std::printf("%-28s %12s %12s %9s\n", "", "predicted", "measured", "error");
  std::printf("%-28s %12.1f %12.1f %+8.1f%%%s\n", "before (B0)", a.tokens_per_s_before, b0_mean,
              100 * (a.tokens_per_s_before / std::max(1e-9, b0_mean) - 1),
              m2 > 0 ? absl::StrFormat("  (%.1f, then %.1f)", m0, m2).c_str() : "");
  std::printf("%-28s %12.1f %12.1f %+8.1f%%  (expected +-%.0f%%%s)\n", "after (B1)",
              a.tokens_per_s_after, m1, 100 * plan_error, 100 * a.expected_error,
              a.outside_measured ? ", beyond measured shapes" : "");
  std::printf("%-28s %12.3f %12.3f %+8.1f%%  (the action's own prediction)\n", "after / before",
              predicted_ratio, measured_ratio, 100 * ratio_error);
  nlohmann::json out = {{"model", cfg.model},
                        {"concurrency", n},
                        {"clients", clients},
                        {"calibration", nlohmann::json::parse(CalibrationToJson(cal))},
                        {"action", a.what},
                        {"action_kind", ActionKindName(a.kind)},
                        {"restart_flags", a.restart_flags},
                        {"device_before", b0.device},
                        {"device_after", b1.device},
                        {"loadavg_start", load_start},
                        {"loadavg_end", LoadAvg()},
                        {"plan_metric", mix ? "output_tokens_per_s" : "decode_tokens_per_s"},
                        {"plan_predicted_before", a.tokens_per_s_before},
                        {"measured_before", m0},
                        {"measured_before_again", m2},
                        {"plan_predicted", a.tokens_per_s_after},
                        {"plan_measured", m1},
                        {"plan_error", plan_error},
                        {"predicted_ratio", predicted_ratio},
                        {"measured_ratio", measured_ratio},
                        {"ratio_error", ratio_error},
                        {"expected_error", a.expected_error},
                        {"outside_measured", a.outside_measured},
                        {"diagnosed", nlohmann::json::parse(ReportJson(ToProto(before), false))},
                        {"before", nlohmann::json::parse(ReportJson(ToProto(b0.report), false))},
                        {"after", nlohmann::json::parse(ReportJson(ToProto(b1.report), false))}};
  return bench::WriteJson(out, absl::GetFlag(FLAGS_json));
}

int Main() {
  const int start = absl::GetFlag(FLAGS_start_seqs), n = absl::GetFlag(FLAGS_concurrency);
  const int seqs_limit = absl::GetFlag(FLAGS_seqs_limit);
  const double ramp = absl::GetFlag(FLAGS_ramp_s);
  if (!bench::FlagInRange("seqs_limit", seqs_limit, 1, 1024) ||
      !bench::FlagInRange("start_seqs", start, 1, seqs_limit) ||
      !bench::FlagInRange("concurrency", n, 1, 4096) ||
      !bench::FlagInRange("prompt_len", absl::GetFlag(FLAGS_prompt_len), 1, 1 << 16) ||
      !bench::FlagInRange("max_tokens", absl::GetFlag(FLAGS_max_tokens), 1, 1 << 16) ||
      !bench::FlagInRange("length_jitter", absl::GetFlag(FLAGS_length_jitter), 0.0, 0.9) ||
      !bench::FlagInRange("before_s", absl::GetFlag(FLAGS_before_s), 0.1, 86400.0) ||
      !bench::FlagInRange("after_s", absl::GetFlag(FLAGS_after_s), 0.1, 86400.0) ||
      !(ramp == -1 || bench::FlagInRange("ramp_s", ramp, 0.0, 86400.0)) ||
      !bench::FlagInRange("probe_ms", absl::GetFlag(FLAGS_probe_ms), 0.0, 600000.0) ||
      !bench::FlagInRange("return_s", absl::GetFlag(FLAGS_return_s), 0.0, 86400.0)) {
    return 2;
  }
  const std::string load_start = LoadAvg();
  EngineConfig cfg = EngineConfigFromFlags();
  const double jitter = absl::GetFlag(FLAGS_length_jitter);
  cfg.max_model_len =
      int(std::ceil((absl::GetFlag(FLAGS_prompt_len) + absl::GetFlag(FLAGS_max_tokens)) *
                    (1 + jitter))) +
      16;
  cfg.max_num_seqs_limit = seqs_limit;
  cfg.options.max_num_seqs = start;
  std::cerr << "loading " << cfg.model << " ...\n";
  auto engine_or = Engine::Create(cfg);
  if (!engine_or.ok()) {
    std::cerr << "engine: " << engine_or.status() << "\n";
    return 1;
  }
  Engine* engine = engine_or->get();
  // The server's own diagnostics session: calibration, probe steps, window rule, tracking.
  DiagnosticsSession session("saturn-bench-plan");
  CalibrationSource source;
  source.probe_ms = absl::GetFlag(FLAGS_probe_ms);
  if (absl::Status st = session.Start(engine, source); !st.ok()) {
    std::cerr << "calibration: " << st << "\n";
    return 1;
  }
  const Calibration cal = *session.calibration();
  std::printf("device %s | GEMM %.1f GFLOP/s | bandwidth %.1f GB/s | dispatch %.2f us/op\n",
              cal.device.c_str(), cal.gemm_flops_per_s / 1e9, cal.bandwidth_bytes_per_s / 1e9,
              cal.op_dispatch_us);
  StepProbeOptions probe_options;  // the probe again after the load (--probe_after)
  probe_options.budget_ms = source.probe_ms;
  probe_options.max_batch = cfg.max_num_seqs_limit;
  probe_options.max_prefill_tokens = cfg.options.max_num_batched_tokens;

  const int prompt_len = absl::GetFlag(FLAGS_prompt_len),
            max_tokens = absl::GetFlag(FLAGS_max_tokens);
  auto load = std::make_unique<ClosedLoop>(engine, n, prompt_len, max_tokens, jitter);
  Sleep(0.5);  // past the first admissions
  const double b0 = NowUs();
  Sleep(absl::GetFlag(FLAGS_before_s));
  const double b1 = NowUs();
  std::vector<StepRecord> before_steps;
  const DiagnosticsReport before = session.BuildReport(*engine, b0, b1, &before_steps);
  std::printf("--- before (max_num_seqs %d, %d clients) ---\n%s", start, n,
              RenderReport(ToProto(before)).c_str());
  if (before.plan.actions.empty()) {
    std::printf("no plan action: %s\n", before.plan.note.c_str());
    return 1;
  }
  // The top action, or the one --follow names.
  const std::string follow = absl::GetFlag(FLAGS_follow);
  auto it = std::find_if(
      before.plan.actions.begin(), before.plan.actions.end(),
      [&](const Action& x) { return follow == "top" || follow == ActionKindName(x.kind); });
  if (it == before.plan.actions.end()) {
    std::printf("the plan has no %s action\n", follow.c_str());
    return 1;
  }
  const Action& a = *it;
  if (!a.restart_flags.empty()) {  // quantize_weights: followed by a new engine
    load->Stop();
    engine_or->reset();
    // The prediction is for the plan's state up to this action: the earlier actions' options
    // (in a.options_after) and clients too.
    int clients = n;
    for (auto e = before.plan.actions.begin(); e != it; ++e) {
      if (e->kind == ActionKind::kRaiseClientConcurrency) {
        clients = std::max(clients, int(std::lround(e->to)));
      }
    }
    return FollowRestart(cfg, a, before, n, clients, cal, load_start);
  }
  const EngineOptions& o = a.options_after;
  const EngineOptions options_before = engine->options();
  auto applied =
      engine->UpdateOptions(EngineOptions{o.max_num_seqs, o.max_num_batched_tokens, o.cuda_graphs});
  if (!applied.ok()) {
    std::cerr << "UpdateOptions: " << applied.status() << "\n";
    return 1;
  }
  // As the server does after UpdateEngineOptions: probe the shapes the change opened.
  session.ReprobeAfterOptions(engine, options_before, *applied);
  int clients_after = n;
  if (a.kind == ActionKind::kRaiseClientConcurrency) {  // client side: rerun at the planned load
    clients_after = std::max(n, int(std::lround(a.to)));
    load->Stop();
    load = std::make_unique<ClosedLoop>(engine, clients_after, prompt_len, max_tokens, jitter);
  }
  const double ramp_took_s = Ramp(*load, clients_after);
  const double t_applied = NowUs();
  if (!session.TrackAction(a, t_applied)) {
    std::cerr << "the session lost the plan it made\n";
    return 1;
  }
  Sleep(absl::GetFlag(FLAGS_after_s));
  const double a1 = NowUs();
  std::vector<StepRecord> after_steps;
  const DiagnosticsReport after = session.BuildReport(*engine, t_applied, a1, &after_steps);
  const std::optional<TrackedOutcome>& t = after.tracked;
  const nlohmann::json parts = MixParts(a.mix_after, after_steps);
  const nlohmann::json mixed_before = MixedByClass(before_steps);
  const nlohmann::json mixed_after = MixedByClass(after_steps);
  // A-B-A: the load before the change, again. The same load on the same options measured
  // twice brackets the after window; what moved between them is the machine.
  double return_tokens_per_s = 0;
  if (const double back_s = absl::GetFlag(FLAGS_return_s); back_s > 0) {
    if (auto r = engine->UpdateOptions(options_before); !r.ok()) {
      std::cerr << "UpdateOptions (back): " << r.status() << "\n";
      return 1;
    }
    if (clients_after != n) {
      load->Stop();
      load = std::make_unique<ClosedLoop>(engine, n, prompt_len, max_tokens, jitter);
    }
    Ramp(*load, n);
    const double r0 = NowUs();
    Sleep(back_s);
    return_tokens_per_s = session.BuildReport(*engine, r0, NowUs()).profile.output_tokens_per_s;
  }
  load->Stop();
  const std::optional<StepProbe> probe_before = engine->step_probe();
  std::optional<StepProbe> probe_after;
  if (absl::GetFlag(FLAGS_probe_after) && probe_options.budget_ms > 0) {
    auto p = engine->ProbeSteps(probe_options);
    if (p.ok()) probe_after = *p;
  }
  if (!t.has_value() || t->steady_steps == 0) {
    std::cerr << "no steady decode steps after the change\n";
    return 1;
  }
  // What the plan predicts is output tokens/s of the mix when it used one (prefill_share > 0),
  // decode tokens/s of steady decode steps otherwise.
  const bool mix = a.prefill_share > 0;
  const double measured_plan = mix ? after.profile.output_tokens_per_s : t->measured_tokens_per_s;
  const double plan_error = a.tokens_per_s_after / std::max(1e-9, measured_plan) - 1;
  std::printf("--- after \"%s\" ---\n%s", a.what.c_str(), RenderReport(ToProto(after)).c_str());
  std::printf("\n%-28s %12s %12s %9s\n", "", "predicted", "measured", "error");
  std::printf("%-28s %12.1f %12.1f %+8.1f%%\n", "decode tokens/s", t->predicted_tokens_per_s,
              t->measured_tokens_per_s, 100 * t->tokens_per_s_error);
  std::printf("%-28s %12.2f %12.2f %+8.1f%%\n", "TPOT ms", t->predicted_tpot_ms,
              t->measured_tpot_ms, 100 * t->tpot_error);
  std::printf("%-28s %12.1f %12.1f %+8.1f%%  (expected +-%.0f%%%s)\n",
              mix ? "plan: output tokens/s" : "plan: decode tokens/s", a.tokens_per_s_after,
              measured_plan, 100 * plan_error, 100 * a.expected_error,
              a.outside_measured ? ", beyond measured shapes" : "");
  std::printf("%-28s %12.1f %12.1f %+8.1f%%\n", "model at measured batch",
              t->model_tokens_per_s_at_measured_batch, t->measured_tokens_per_s,
              100 * t->model_error);
  // The machine's part: the steady steps against the plan's curve at their batch.
  const double drift = t->step_time_drift;
  const double corrected_error =
      drift > 0 ? a.tokens_per_s_after / (drift * std::max(1e-9, measured_plan)) - 1 : 0;
  if (drift > 0) {
    std::printf("%-28s %12.1f %12.1f %+8.1f%%  (steps ran %.2fx the curve's time, %d steps)\n",
                "plan, rescaled by drift", a.tokens_per_s_after / drift, measured_plan,
                100 * corrected_error, drift, t->drift_steps);
  }
  // A-B-A: the machine at the after window is taken as halfway between the two A windows.
  const double machine_move =
      return_tokens_per_s > 0 ? return_tokens_per_s / before.profile.output_tokens_per_s : 0;
  const double aba_factor = machine_move > 0 ? (1 + machine_move) / 2 : 0;
  const double aba_error =
      aba_factor > 0 ? a.tokens_per_s_after * aba_factor / std::max(1e-9, measured_plan) - 1 : 0;
  if (machine_move > 0) {
    std::printf(
        "%-28s %12.1f %12.1f %+8.1f%%  (the load before the change, measured again after it: "
        "%.1f -> %.1f output tok/s, %.2fx)\n",
        "plan, A-B-A corrected", a.tokens_per_s_after * aba_factor, measured_plan, 100 * aba_error,
        before.profile.output_tokens_per_s, return_tokens_per_s, machine_move);
  }
  if (!parts.empty()) {
    std::printf("%-28s %12s %12s %9s\n", "request-mix parts", "predicted", "measured", "ratio");
    for (const auto& [name, v] : parts.items()) {
      const double pr = v[0].get<double>(), me = v[1].get<double>();
      std::printf("  %-26s %12.2f %12.2f %9.2f\n", name.c_str(), pr, me, me > 0 ? pr / me : 0.0);
    }
  }
  if (!mixed_before.empty() && !mixed_after.empty()) {
    std::printf("steps carrying prefill, before -> after the change (mean per step):");
    for (const auto& [name, v] : mixed_before.items()) {
      if (mixed_after.contains(name)) {
        std::printf(" %s %.1f -> %.1f;", name.c_str(), v.get<double>(),
                    mixed_after[name].get<double>());
      }
    }
    std::printf("\n");
  }
  // Probe steps need no load, so their change over the run is the machine's, not the plan's.
  const std::vector<double> ratios = ProbeRatios(probe_before, probe_after);
  const double ratio_median = ratios.empty() ? 0 : ratios[ratios.size() / 2];
  if (!ratios.empty()) {
    std::printf(
        "machine drift: the probe steps after the load took %.2fx their time before it (median "
        "over %zu shapes, range %.2f-%.2f)\n",
        ratio_median, ratios.size(), ratios.front(), ratios.back());
  }
  std::printf(
      "ramp %.1f s; batch planned %.1f, measured %.1f over %d steady steps; before: %.1f decode "
      "tok/s "
      "(predicted %.1f); output tok/s before %.1f, after %.1f (%.2fx)\n",
      ramp_took_s, a.batch_after, t->measured_batch, t->steady_steps,
      before.profile.decode_tokens_per_s, a.tokens_per_s_before, before.profile.output_tokens_per_s,
      after.profile.output_tokens_per_s,
      after.profile.output_tokens_per_s / std::max(1e-9, before.profile.output_tokens_per_s));

  nlohmann::json out = {{"model", cfg.model},
                        {"backend", engine->info().backend},
                        {"start_max_num_seqs", start},
                        {"concurrency", n},
                        {"calibration", nlohmann::json::parse(CalibrationToJson(cal))},
                        {"action", a.what},
                        {"action_kind", ActionKindName(a.kind)},
                        {"prompt_len", prompt_len},
                        {"length_jitter", jitter},
                        {"max_tokens", max_tokens},
                        {"clients_after", clients_after},
                        {"probe_ms", probe_options.budget_ms},
                        {"ramp_s", ramp_took_s},
                        {"probe", ProbeJson(probe_before)},
                        {"probe_after", ProbeJson(probe_after)},
                        {"probe_ratio_median", ratio_median},
                        {"probe_ratio_min", ratios.empty() ? 0 : ratios.front()},
                        {"probe_ratio_max", ratios.empty() ? 0 : ratios.back()},
                        {"loadavg_start", load_start},
                        {"loadavg_end", LoadAvg()},
                        {"plan_metric", mix ? "output_tokens_per_s" : "decode_tokens_per_s"},
                        {"plan_predicted", a.tokens_per_s_after},
                        {"plan_measured", measured_plan},
                        {"plan_error", plan_error},
                        {"expected_error", a.expected_error},
                        {"outside_measured", a.outside_measured},
                        {"predicted_prefill_share", a.prefill_share},
                        {"mix_parts", parts},
                        {"mixed_steps_before", mixed_before},
                        {"mixed_steps_after", mixed_after},
                        {"before", nlohmann::json::parse(ReportJson(ToProto(before), false))},
                        {"after", nlohmann::json::parse(ReportJson(ToProto(after), false))},
                        {"predicted_tokens_per_s", t->predicted_tokens_per_s},
                        {"measured_tokens_per_s", t->measured_tokens_per_s},
                        {"tokens_per_s_error", t->tokens_per_s_error},
                        {"predicted_tpot_ms", t->predicted_tpot_ms},
                        {"measured_tpot_ms", t->measured_tpot_ms},
                        {"tpot_error", t->tpot_error},
                        {"planned_batch", a.batch_after},
                        {"measured_batch", t->measured_batch},
                        {"model_error", t->model_error},
                        {"step_time_drift", drift},
                        {"drift_steps", t->drift_steps},
                        {"drift_corrected_plan_error", corrected_error},
                        {"before_output_tokens_per_s", before.profile.output_tokens_per_s},
                        {"return_output_tokens_per_s", return_tokens_per_s},
                        {"return_machine_move", machine_move},
                        {"aba_corrected_plan_error", aba_error},
                        {"steady_steps", t->steady_steps}};
  return bench::WriteJson(out, absl::GetFlag(FLAGS_json));
}

}  // namespace
}  // namespace saturn

int main(int argc, char** argv) {
  // --backend defaults to cpu in this tool (the engine flags' default is auto): set before
  // parsing, so the command line still wins. --help lists auto; the usage says cpu.
  absl::SetFlag(&FLAGS_backend, "cpu");
  return saturn::bench::RunTool(argc, argv, saturn::kUsage, saturn::Main);
}
