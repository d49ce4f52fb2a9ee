// Test helper: a hand-built DiagnosticsReport with every part the renderings show (signals,
// profile, op classes, a two-action plan with trade-offs, a tracked outcome, step points)
// and known values. Header-only, test code only.
#pragma once

#include "saturn/v1/diagnostics.pb.h"

namespace saturn::clients::testing {

inline v1::DiagnosticsReport SampleReport() {
  v1::DiagnosticsReport r;
  r.set_window_begin_us(1e6);
  r.set_window_end_us(11e6);
  r.set_bottleneck(v1::BOTTLENECK_MEMORY_BOUND);
  r.set_step_bound(v1::BOTTLENECK_MEMORY_BOUND);
  r.set_summary("MEMORY_BOUND: intensity 0.9 FLOP/B under the ridge 5.0");
  v1::Signal* s = r.add_signals();
  s->set_name("compute_vs_memory_floor");
  s->set_value(0.18);
  s->set_threshold(1);
  s->set_crossed(false);
  s->set_meaning("the steps' FLOPs need more time than their bytes");
  s = r.add_signals();
  s->set_name("max_waiting_requests");
  s->set_value(6);
  s->set_threshold(0.5);
  s->set_crossed(true);
  s->set_meaning("requests waited for a slot");
  v1::Profile* p = r.mutable_profile();
  p->set_window_s(10);
  p->set_steps(120);
  p->set_tokens_per_s(240.5);
  p->set_decode_tokens_per_s(230.25);
  p->set_mean_batch_seqs(4);
  p->set_busy_fraction(0.97);
  p->set_mfu(0.0125);
  p->set_mbu(0.71);
  p->set_intensity(0.9);
  p->set_ridge(5);
  p->set_flops_per_s(9e9);
  p->set_bytes_per_s(1e10);
  const char* names[] = {"gemm", "attention", "norm", "elementwise", "sampling"};
  const double intensity[] = {1.6, 0.5, 0.25, 0.15, 0};
  const double flops[] = {8e9, 5e8, 2e8, 1e8, 0};
  for (int i = 0; i < 5; ++i) {
    v1::OpClassProfile* c = r.add_classes();
    c->set_op_class(names[i]);
    c->set_intensity(intensity[i]);
    c->set_flops_per_s(flops[i]);
    c->set_time_share(0.2);
    c->set_ops_per_step(10 + i);
  }
  v1::Calibration* cal = r.mutable_calibration();
  cal->set_backend("cpu");
  cal->set_device("Test CPU <2 threads> & more");
  cal->set_dtype("f32");
  cal->set_gemm_flops_per_s(1e11);
  cal->set_bandwidth_bytes_per_s(2e10);
  cal->set_ridge_flops_per_byte(5);
  cal->set_op_dispatch_us(1.5);
  cal->set_gemm_method("512x512x512 sgemm, best of 5");
  cal->set_bandwidth_method("256 MiB memcpy");
  cal->set_dispatch_method("empty op x 1000");
  cal->set_source("measured");
  v1::PlanAction* a = r.add_plan();
  a->set_kind("raise_max_num_seqs");
  a->set_what("raise max_num_seqs 4 -> 48");
  a->set_from(4);
  a->set_to(48);
  a->set_tokens_per_s_before(120);
  a->set_tokens_per_s_after(300);
  a->set_tpot_ms_before(8);
  a->set_tpot_ms_after(12.5);
  a->set_batch_after(48);
  a->set_max_num_seqs(48);
  a->set_max_num_batched_tokens(512);
  a->set_expected_error(0.12);
  a->set_outside_measured(true);
  a->set_prefill_share(0.3);
  v1::Tradeoff* t = a->add_tradeoffs();
  t->set_name("kv_preemption");
  t->set_at(64);
  t->set_detail("past 64 sequences the KV cache preempts");
  a = r.add_plan();
  a->set_kind("raise_max_num_batched_tokens");
  a->set_what("raise max_num_batched_tokens 512 -> 1024");
  a->set_from(512);
  a->set_to(1024);
  a->set_tokens_per_s_before(300);
  a->set_tokens_per_s_after(320);
  a->set_max_num_seqs(48);
  a->set_max_num_batched_tokens(1024);
  r.set_kv_capacity_batch(64);
  r.set_plateau_batch(40);
  r.set_plateau_tokens_per_s(310);
  v1::TrackedOutcome* o = r.mutable_tracked();
  o->set_kind("raise_max_num_seqs");
  o->set_what("raise max_num_seqs 2 -> 4");
  o->set_settled(true);
  o->set_steady_steps(30);
  o->set_predicted_tokens_per_s(110);
  o->set_measured_tokens_per_s(100);
  o->set_tokens_per_s_error(0.1);
  for (int i = 0; i < 20; ++i) {
    v1::StepPoint* sp = r.add_step_points();
    sp->set_step_id(100 + i);
    sp->set_intensity(0.5 + 0.05 * i);
    sp->set_flops_per_s(2e9 + 1e8 * i);
    sp->set_num_seqs(4);
    sp->set_decode_tokens(4);
  }
  return r;
}

}  // namespace saturn::clients::testing
