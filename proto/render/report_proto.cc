// Field-by-field copies; the names match the analyzer's structs (docs/DIAGNOSTICS.md).
#include "proto/render/report_proto.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <array>
#include <string>
#include <type_traits>
#include <variant>

#include "engine/measure/calibration_fields.h"
#include "kernels/base/enum_table.h"
#include "proto/render/report_json.h"
#include "proto/render/report_text.h"

namespace saturn {
namespace {

void ToProto(const Profile& p, v1::Profile* out) {
  out->set_window_s(p.window_s);
  out->set_steps(p.steps);
  out->set_summed_steps(p.summed_steps);
  out->set_steps_per_s(p.steps_per_s);
  out->set_prefill_tokens_per_s(p.prefill_tokens_per_s);
  out->set_decode_tokens_per_s(p.decode_tokens_per_s);
  out->set_decode_step_tokens_per_s(p.decode_step_tokens_per_s);
  out->set_decoding_step_tokens_per_s(p.decoding_step_tokens_per_s);
  out->set_tokens_per_s(p.tokens_per_s);
  out->set_mean_batch_seqs(p.mean_batch_seqs);
  out->set_mean_batch_tokens(p.mean_batch_tokens);
  out->set_mean_step_ms(p.mean_step_ms);
  out->set_mean_decode_step_ms(p.mean_decode_step_ms);
  out->set_mean_context(p.mean_context);
  out->set_busy_fraction(p.busy_fraction);
  out->set_idle_share(p.idle_share);
  out->set_host_share(p.host_share);
  out->set_launch_share(p.launch_share);
  out->set_flops_per_s(p.flops_per_s);
  out->set_bytes_per_s(p.bytes_per_s);
  out->set_mfu(p.mfu);
  out->set_mbu(p.mbu);
  out->set_intensity(p.intensity);
  out->set_ridge(p.ridge);
  out->set_mean_queue_depth(p.mean_queue_depth);
  out->set_mean_running(p.mean_running);
  out->set_kv_usage(p.kv_usage);
  out->set_kv_usage_max(p.kv_usage_max);
  out->set_preemptions(p.preemptions);
  out->set_graph_hit_rate(p.graph_hit_rate);
  out->set_padding_waste(p.padding_waste);
  out->set_prefix_hit_rate(p.prefix_hit_rate);
  out->set_prefix_saved_tokens_per_s(p.prefix_saved_tokens_per_s);
  out->set_prefix_missed_rate(p.prefix_missed_rate);
  out->set_prefix_missed_tokens_per_s(p.prefix_missed_tokens_per_s);
  out->set_prefill_step_share(p.prefill_step_share);
  out->set_speculating(p.speculating);
  out->set_spec_proposal_rate(p.spec_proposal_rate);
  out->set_spec_mean_drafted(p.spec_mean_drafted);
  out->set_spec_acceptance_rate(p.spec_acceptance_rate);
  out->set_spec_mean_accepted(p.spec_mean_accepted);
  out->set_spec_accepted_tokens_per_s(p.spec_accepted_tokens_per_s);
  out->set_output_tokens_per_s(p.output_tokens_per_s);
  out->set_max_queue_depth(p.max_queue_depth);
  out->set_loop_gap_us(p.loop_gap_us);
}

void ToProto(const ClassProfile& c, v1::OpClassProfile* out) {
  out->set_op_class(OpClassName(c.op_class));
  out->set_ops_per_step(c.ops_per_step);
  out->set_time_share(c.time_share);
  out->set_flops(c.flops);
  out->set_bytes(c.bytes);
  out->set_intensity(c.intensity);
  out->set_flops_per_s(c.flops_per_s);
  out->set_bytes_per_s(c.bytes_per_s);
  out->set_mfu(c.mfu);
  out->set_mbu(c.mbu);
  out->set_roofline_efficiency(c.roofline_efficiency);
  out->set_time_us(c.time_us);
  out->set_compute_side(c.compute_side);
}

void ToProto(const Action& a, v1::PlanAction* out) {
  out->set_kind(ActionKindName(a.kind));
  out->set_what(a.what);
  out->set_from(a.from);
  out->set_to(a.to);
  out->set_tokens_per_s_before(a.tokens_per_s_before);
  out->set_tokens_per_s_after(a.tokens_per_s_after);
  out->set_tpot_ms_before(a.tpot_ms_before);
  out->set_tpot_ms_after(a.tpot_ms_after);
  out->set_batch_after(a.batch_after);
  out->set_max_num_seqs(a.options_after.max_num_seqs);
  out->set_max_num_batched_tokens(a.options_after.max_num_batched_tokens);
  out->set_cuda_graphs(a.options_after.cuda_graphs);
  out->set_prefix_caching(a.options_after.prefix_caching);
  out->set_num_speculative_tokens(a.options_after.num_speculative_tokens);
  out->set_expected_error(a.expected_error);
  out->set_outside_measured(a.outside_measured);
  out->set_untrusted(a.untrusted);
  out->set_settle_by(a.settle_by);
  out->set_prefill_share(a.prefill_share);
  out->set_restart_flags(a.restart_flags);
  for (const FailureMode& f : a.tradeoffs) {
    v1::Tradeoff* t = out->add_tradeoffs();
    t->set_name(f.name);
    t->set_at(f.at);
    t->set_detail(f.detail);
  }
}

void ToProto(const TrackedOutcome& t, v1::TrackedOutcome* out) {
  out->set_kind(ActionKindName(t.kind));
  out->set_what(t.what);
  out->set_applied_us(t.applied_us);
  out->set_steady_steps(t.steady_steps);
  out->set_settled(t.settled);
  out->set_measured_batch(t.measured_batch);
  out->set_predicted_tokens_per_s(t.predicted_tokens_per_s);
  out->set_measured_tokens_per_s(t.measured_tokens_per_s);
  out->set_tokens_per_s_error(t.tokens_per_s_error);
  out->set_predicted_tpot_ms(t.predicted_tpot_ms);
  out->set_measured_tpot_ms(t.measured_tpot_ms);
  out->set_tpot_error(t.tpot_error);
  out->set_model_tokens_per_s_at_measured_batch(t.model_tokens_per_s_at_measured_batch);
  out->set_model_error(t.model_error);
  out->set_step_time_drift(t.step_time_drift);
  out->set_drift_corrected_error(t.drift_corrected_error);
  out->set_drift_steps(t.drift_steps);
}

void ToProto(const StepModel& m, v1::StepModel* out) {
  out->set_host_us(m.host_us);
  out->set_host_us_per_seq(m.host_us_per_seq);
  out->set_dispatch_us(m.dispatch_us);
  out->set_op_overhead_us(m.op_overhead_us);
  out->set_fitted_steps(m.fitted_steps);
  out->set_fit_error(m.fit_error);
  for (size_t c = 0; c < kNumOpClasses; ++c) {
    const ClassRates& r = m.rates[c];
    v1::ClassRates* o = out->add_classes();
    o->set_op_class(OpClassName(static_cast<OpClass>(c)));
    o->set_bytes_per_s(r.bytes_per_us * 1e6);
    o->set_flops_per_s(r.flops_per_us * 1e6);
    o->set_bandwidth_fitted(r.bandwidth_fitted);
    o->set_compute_fitted(r.compute_fitted);
    o->set_form(r.additive ? "sum" : "max");
    o->set_samples(r.samples);
    o->set_rms_error_us(r.rms_error_us);
  }
}

void ToProto(const std::vector<CurvePoint>& pts,
             google::protobuf::RepeatedPtrField<v1::CurvePoint>* out) {
  for (const CurvePoint& p : pts) {
    v1::CurvePoint* o = out->Add();
    o->set_x(p.x);
    o->set_us(p.us);
    o->set_spread(p.spread);
    o->set_samples(p.samples);
    o->set_error(p.error);
  }
}

void ToProto(const StepRecord& r, v1::StepPoint* out) {
  const double flops = r.total_flops(), bytes = r.total_bytes();
  out->set_step_id(r.step_id);
  out->set_intensity(bytes > 0 ? flops / bytes : 0);
  out->set_flops_per_s(r.wall_us() > 0 ? flops / (r.wall_us() * 1e-6) : 0);
  out->set_num_seqs(r.num_seqs);
  out->set_prefill_tokens(r.num_prefill_tokens);
  out->set_decode_tokens(r.num_decode_tokens);
}

}  // namespace

v1::Bottleneck ToProto(Bottleneck b) {
  static constexpr std::array kProto{v1::BOTTLENECK_UNKNOWN,
                                     v1::BOTTLENECK_UNDERLOADED,
                                     v1::BOTTLENECK_LAUNCH_BOUND,
                                     v1::BOTTLENECK_MEMORY_BOUND,
                                     v1::BOTTLENECK_COMPUTE_BOUND,
                                     v1::BOTTLENECK_HOST_BOUND,
                                     v1::BOTTLENECK_COMMUNICATION_BOUND};  // Bottleneck's order
  return EnumLookup(kProto, b, v1::BOTTLENECK_UNKNOWN);
}

void ToProto(const Calibration& c, double calibration_ms, v1::Calibration* out) {
  // The stored fields by name (engine/measure/calibration_fields.h; CalibrationProtoTest checks
  // every name has a v1.Calibration field of its type, and every field of that message a source).
  const google::protobuf::Descriptor* d = out->GetDescriptor();
  const google::protobuf::Reflection* r = out->GetReflection();
  for (const CalibrationField& f : kCalibrationFields) {
    const google::protobuf::FieldDescriptor* fd = d->FindFieldByName(f.name);
    if (fd == nullptr || fd->is_repeated()) continue;  // file-only (measured_unix_s: age_s here)
    std::visit(
        [&](auto member) {
          using T = std::remove_cvref_t<decltype(c.*member)>;
          using FD = google::protobuf::FieldDescriptor;
          // A type the message does not have is skipped, never set (reflection would abort).
          if constexpr (std::is_same_v<T, std::string>) {
            if (fd->cpp_type() == FD::CPPTYPE_STRING) r->SetString(out, fd, c.*member);
          } else if constexpr (std::is_same_v<T, double>) {
            if (fd->cpp_type() == FD::CPPTYPE_DOUBLE) r->SetDouble(out, fd, c.*member);
          } else {
            static_assert(std::is_same_v<T, bool>, "a CalibrationField type ToProto cannot set");
            if (fd->cpp_type() == FD::CPPTYPE_BOOL) r->SetBool(out, fd, c.*member);
          }
        },
        f.member);
  }
  out->set_ridge_flops_per_byte(c.ridge_flops_per_byte());
  out->set_source(c.source);
  out->set_calibration_ms(calibration_ms);
}

void ToProto(const GraphInfo& g, v1::CudaGraphInfo* out) {
  out->mutable_captured_sizes()->Add(g.sizes.begin(), g.sizes.end());
  out->set_capture_ms(g.capture_ms);
  out->set_memory_bytes(static_cast<int64_t>(g.memory_bytes));
}

void ToProto(const DiagnosticsReport& r, const std::vector<StepRecord>& steps,
             const ReportProtoOptions& options, v1::DiagnosticsReport* out) {
  out->set_window_begin_us(r.window_begin_us);
  out->set_window_end_us(r.window_end_us);
  out->set_bottleneck(ToProto(r.verdict.bottleneck));
  out->set_step_bound(ToProto(r.verdict.step_bound));
  out->set_summary(r.verdict.summary);
  for (const Signal& s : r.verdict.signals) {
    v1::Signal* o = out->add_signals();
    o->set_name(s.name);
    o->set_value(s.value);
    o->set_threshold(s.threshold);
    o->set_crossed(s.crossed);
    o->set_source(s.source);
    o->set_meaning(s.meaning);
  }
  ToProto(r.profile, out->mutable_profile());
  for (const ClassProfile& c : r.profile.classes) ToProto(c, out->add_classes());
  ToProto(r.calibration, 0, out->mutable_calibration());
  const CalibrationCheck& cc = r.verdict.calibration_check;
  out->mutable_calibration()->set_suspect(cc.suspect);
  if (!cc.notes.empty()) out->mutable_calibration()->set_suspect_reason(cc.notes.front());
  for (const std::string& n : cc.notes) out->add_calibration_notes(n);
  out->set_judged_flops_per_s(cc.judged_flops_per_s);
  out->set_judged_bytes_per_s(cc.judged_bytes_per_s);
  out->set_cache_resident(cc.cache_resident);
  out->set_observed_max_flops_per_s(cc.observed_max_flops_per_s);
  out->set_observed_max_bytes_per_s(cc.observed_max_bytes_per_s);
  out->set_raw_mfu(cc.raw_mfu);
  out->set_raw_mbu(cc.raw_mbu);
  out->set_step_mfu(r.verdict.step_mfu);
  out->set_step_mbu(r.verdict.step_mbu);
  out->set_far_below_roofs(r.verdict.far_below_roofs);
  for (const Headroom& h : r.verdict.headroom) {
    v1::Headroom* o = out->add_headroom();
    o->set_op_class(OpClassName(h.op_class));
    o->set_step_share(h.step_share);
    o->set_roofline_efficiency(h.roofline_efficiency);
    o->set_step_saved_share(h.step_saved_share);
    o->set_speedup(h.speedup);
  }
  out->set_window_note(r.verdict.window_note);
  out->set_run_share(r.verdict.run_share);
  if (const TensorParallelProfile& t = r.verdict.tensor_parallel; t.ranks > 0) {
    v1::TensorParallelProfile* o = out->mutable_tensor_parallel();
    o->set_ranks(t.ranks);
    o->set_transport(t.transport);
    o->set_single_host(t.single_host);
    o->set_steps(t.steps);
    o->set_collectives_per_step(t.collectives_per_step);
    o->set_mean_collective_us(t.mean_collective_us);
    o->set_mean_collective_bytes(t.mean_collective_bytes);
    o->set_comm_share(t.comm_share);
    o->set_wait_share(t.wait_share);
    o->set_transfer_share(t.transfer_share);
    o->set_load_balance(t.load_balance);
    o->set_slowest_rank(t.slowest_rank);
    o->set_slowest_over_fastest(t.slowest_over_fastest);
    o->set_comm_vs_roofline_floor(t.comm_vs_roofline_floor);
    o->set_transfer_us(t.transfer_us);
    o->set_calibrated_us(t.calibrated_us);
    o->set_transfer_vs_calibrated(t.transfer_vs_calibrated);
    o->set_slowest_run_share(t.slowest_run_share);
  }
  for (const Action& a : r.plan.actions) ToProto(a, out->add_plan());
  out->set_plan_note(r.plan.note);
  out->set_kv_capacity_batch(r.plan.kv_capacity_batch);
  out->set_plateau_batch(r.plan.plateau_batch);
  out->set_plateau_tokens_per_s(r.plan.plateau_tokens_per_s);
  out->set_plan_batch_now(r.plan.batch_now);
  out->set_plan_context(r.plan.context);
  out->set_plan_expected_seq_len(r.plan.expected_seq_len);
  out->set_measured_max_batch(r.plan.measured_max_batch);
  out->set_measured_max_prefill_rows(r.plan.measured_max_prefill_rows);
  out->set_used_probe(r.plan.used_probe);
  out->set_sampling_gap_us_per_row(r.plan.sampling_gap_us_per_row);
  out->set_step_drift(r.plan.step_drift);
  ToProto(r.plan.curve.decode, out->mutable_plan_curve()->mutable_decode());
  ToProto(r.plan.curve.prefill, out->mutable_plan_curve()->mutable_prefill());
  ToProto(r.plan.curve.decode_after_prefill,
          out->mutable_plan_curve()->mutable_decode_after_prefill());
  if (r.tracked.has_value()) ToProto(*r.tracked, out->mutable_tracked());
  ToProto(r.model, out->mutable_model());
  if (options.max_step_points > 0 && !steps.empty()) {
    // Evenly spaced over the window, newest included.
    const size_t n = std::min(steps.size(), static_cast<size_t>(options.max_step_points));
    for (size_t i = 0; i < n; ++i) {
      const size_t idx = n == 1 ? steps.size() - 1 : i * (steps.size() - 1) / (n - 1);
      ToProto(steps[idx], out->add_step_points());
    }
  }
  out->set_model_fit_error(r.model.fit_error);
  out->set_model_form(r.model.rates[static_cast<size_t>(OpClass::kGemm)].additive ? "sum" : "max");
  out->set_nvml_utilization(options.nvml_utilization);
  // The renderings last: they read the fields above.
  out->set_text(RenderReport(*out));
  if (options.include_json) out->set_json(ReportJson(*out, false));
}

v1::DiagnosticsReport ToProto(const DiagnosticsReport& r) {
  v1::DiagnosticsReport out;
  ToProto(r, {}, ReportProtoOptions{}, &out);
  return out;
}

}  // namespace saturn
