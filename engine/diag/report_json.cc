// DiagnosticsReport -> JSON (report_format.h).
#include <nlohmann/json.hpp>

#include "engine/diag/report_format.h"

namespace saturn {
namespace {

using nlohmann::json;

json ToJson(const Signal& s) {
  return {{"name", s.name},       {"value", s.value},   {"threshold", s.threshold},
          {"crossed", s.crossed}, {"source", s.source}, {"meaning", s.meaning}};
}

json ToJson(const Profile& p) {
  json classes = json::array();
  for (const ClassProfile& c : p.classes) {
    classes.push_back({{"class", OpClassName(c.op_class)},
                       {"ops_per_step", c.ops_per_step},
                       {"time_us", c.time_us},
                       {"time_share", c.time_share},
                       {"flops", c.flops},
                       {"bytes", c.bytes},
                       {"intensity", c.intensity},
                       {"flops_per_s", c.flops_per_s},
                       {"bytes_per_s", c.bytes_per_s},
                       {"mfu", c.mfu},
                       {"mbu", c.mbu},
                       {"roofline_efficiency", c.roofline_efficiency},
                       {"bound", c.compute_side ? "compute" : "memory"}});
  }
  return {{"window_s", p.window_s},
          {"steps", p.steps},
          {"steps_per_s", p.steps_per_s},
          {"prefill_tokens_per_s", p.prefill_tokens_per_s},
          {"decode_tokens_per_s", p.decode_tokens_per_s},
          {"tokens_per_s", p.tokens_per_s},
          {"output_tokens_per_s", p.output_tokens_per_s},
          {"mean_batch_seqs", p.mean_batch_seqs},
          {"mean_batch_tokens", p.mean_batch_tokens},
          {"mean_step_ms", p.mean_step_ms},
          {"mean_decode_step_ms", p.mean_decode_step_ms},
          {"mean_context", p.mean_context},
          {"busy_fraction", p.busy_fraction},
          {"idle_share", p.idle_share},
          {"host_share", p.host_share},
          {"loop_gap_us", p.loop_gap_us},
          {"launch_share", p.launch_share},
          {"flops_per_s", p.flops_per_s},
          {"bytes_per_s", p.bytes_per_s},
          {"mfu", p.mfu},
          {"mbu", p.mbu},
          {"intensity", p.intensity},
          {"ridge", p.ridge},
          {"mean_queue_depth", p.mean_queue_depth},
          {"max_queue_depth", p.max_queue_depth},
          {"mean_running", p.mean_running},
          {"kv_usage", p.kv_usage},
          {"kv_usage_max", p.kv_usage_max},
          {"preemptions", p.preemptions},
          {"graph_hit_rate", p.graph_hit_rate},
          {"padding_waste", p.padding_waste},
          {"classes", classes}};
}

json ToJson(const StepModel& m) {
  json rates = json::array();
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    const ClassRates& r = m.rates[c];
    rates.push_back({{"class", OpClassName(static_cast<OpClass>(c))},
                     {"bytes_per_s", r.bytes_per_us * 1e6},
                     {"flops_per_s", r.flops_per_us * 1e6},
                     {"bandwidth_fitted", r.bandwidth_fitted},
                     {"compute_fitted", r.compute_fitted},
                     {"form", r.additive ? "sum" : "max"},
                     {"samples", r.samples},
                     {"rms_error_us", r.rms_error_us}});
  }
  return {{"host_us", m.host_us},
          {"host_us_per_seq", m.host_us_per_seq},
          {"dispatch_us", m.dispatch_us},
          {"op_overhead_us", m.op_overhead_us},
          {"fitted_steps", m.fitted_steps},
          {"fit_error", m.fit_error},
          {"classes", rates}};
}

// Measured step-time points: [rows, median us, spread, samples] each.
json CurveJson(const std::vector<CurvePoint>& pts) {
  json out = json::array();
  for (const CurvePoint& p : pts) out.push_back({p.x, p.us, p.spread, p.samples});
  return out;
}

json ToJson(const Action& a) {
  json t = json::array();
  for (const FailureMode& f : a.tradeoffs) {
    t.push_back({{"name", f.name}, {"at", f.at}, {"detail", f.detail}});
  }
  return {{"kind", ActionKindName(a.kind)},
          {"what", a.what},
          {"from", a.from},
          {"to", a.to},
          {"tokens_per_s_before", a.tokens_per_s_before},
          {"tokens_per_s_after", a.tokens_per_s_after},
          {"tpot_ms_before", a.tpot_ms_before},
          {"tpot_ms_after", a.tpot_ms_after},
          {"expected_error", a.expected_error},
          {"outside_measured", a.outside_measured},
          {"prefill_share", a.prefill_share},
          {"batch_after", a.batch_after},
          {"options_after",
           {{"max_num_seqs", a.options_after.max_num_seqs},
            {"max_num_batched_tokens", a.options_after.max_num_batched_tokens},
            {"cuda_graphs", a.options_after.cuda_graphs}}},
          {"tradeoffs", t}};
}

}  // namespace

std::string ReportToJson(const DiagnosticsReport& r, int indent) {
  json signals = json::array();
  for (const Signal& s : r.verdict.signals) signals.push_back(ToJson(s));
  json actions = json::array();
  for (const Action& a : r.plan.actions) actions.push_back(ToJson(a));
  json headroom = json::array();
  for (const Headroom& h : r.verdict.headroom) {
    headroom.push_back({{"op_class", OpClassName(h.op_class)},
                        {"step_share", h.step_share},
                        {"roofline_efficiency", h.roofline_efficiency},
                        {"step_saved_share", h.step_saved_share},
                        {"speedup", h.speedup}});
  }
  const CalibrationCheck& cc = r.verdict.calibration_check;
  json j = {
      {"window_begin_us", r.window_begin_us},
      {"window_end_us", r.window_end_us},
      {"calibration",
       {{"backend", r.calibration.backend},
        {"device", r.calibration.device},
        {"dtype", r.calibration.dtype},
        {"gemm_flops_per_s", r.calibration.gemm_flops_per_s},
        {"bandwidth_bytes_per_s", r.calibration.bandwidth_bytes_per_s},
        {"op_dispatch_us", r.calibration.op_dispatch_us},
        {"source", r.calibration.source},
        {"stable", r.calibration.stable},
        {"gemm_spread", r.calibration.gemm_spread},
        {"bandwidth_spread", r.calibration.bandwidth_spread},
        {"suspect", cc.suspect},
        {"cache_resident", cc.cache_resident},
        {"notes", cc.notes},
        {"judged_flops_per_s", cc.judged_flops_per_s},
        {"judged_bytes_per_s", cc.judged_bytes_per_s},
        {"observed_max_flops_per_s", cc.observed_max_flops_per_s},
        {"observed_max_bytes_per_s", cc.observed_max_bytes_per_s},
        {"raw_mfu", cc.raw_mfu},
        {"raw_mbu", cc.raw_mbu}}},
      {"profile", ToJson(r.profile)},
      {"verdict",
       {{"bottleneck", BottleneckName(r.verdict.bottleneck)},
        {"step_bound", BottleneckName(r.verdict.step_bound)},
        {"summary", r.verdict.summary},
        {"signals", signals},
        {"step_mfu", r.verdict.step_mfu},
        {"step_mbu", r.verdict.step_mbu},
        {"far_below_roofs", r.verdict.far_below_roofs},
        {"headroom", headroom},
        {"window_note", r.verdict.window_note},
        {"run_share", r.verdict.run_share}}},
      {"model", ToJson(r.model)},
      {"plan",
       {{"batch_now", r.plan.batch_now},
        {"context", r.plan.context},
        {"expected_seq_len", r.plan.expected_seq_len},
        {"kv_capacity_batch", r.plan.kv_capacity_batch},
        {"plateau_batch", r.plan.plateau_batch},
        {"plateau_tokens_per_s", r.plan.plateau_tokens_per_s},
        {"measured_max_batch", r.plan.measured_max_batch},
        {"measured_max_prefill_rows", r.plan.measured_max_prefill_rows},
        {"used_probe", r.plan.used_probe},
        {"curve",
         {{"decode", CurveJson(r.plan.curve.decode)},
          {"prefill", CurveJson(r.plan.curve.prefill)}}},
        {"note", r.plan.note},
        {"actions", actions}}},
  };
  if (r.tracked) {
    const TrackedOutcome& t = *r.tracked;
    j["tracked"] = {
        {"kind", ActionKindName(t.kind)},
        {"what", t.what},
        {"applied_us", t.applied_us},
        {"steady_steps", t.steady_steps},
        {"settled", t.settled},
        {"measured_batch", t.measured_batch},
        {"predicted_tokens_per_s", t.predicted_tokens_per_s},
        {"measured_tokens_per_s", t.measured_tokens_per_s},
        {"tokens_per_s_error", t.tokens_per_s_error},
        {"predicted_tpot_ms", t.predicted_tpot_ms},
        {"measured_tpot_ms", t.measured_tpot_ms},
        {"tpot_error", t.tpot_error},
        {"model_tokens_per_s_at_measured_batch", t.model_tokens_per_s_at_measured_batch},
        {"model_error", t.model_error}};
  }
  return j.dump(indent);
}

}  // namespace saturn
