// --follow_plan's decisions (plan_follow.h); session.cc runs the phases.
#include "clients/load/plan_follow.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "clients/common/plan_options.h"

namespace saturn::clients {

std::optional<FollowStep> NextFollowStep(const v1::DiagnosticsReport& report, int concurrency,
                                         const v1::EngineOptions& now, std::string* why) {
  if (report.plan().empty()) {
    *why = absl::StrCat("no plan action to follow: ",
                        report.plan_note().empty() ? "(no reason given)" : report.plan_note());
    return std::nullopt;
  }
  if (!report.plan(0).restart_flags().empty()) {  // quantize_weights: no live option does it
    *why = absl::StrCat("the top action (", report.plan(0).what(), ") needs a restart with ",
                        report.plan(0).restart_flags(), "; a load run cannot follow it");
    return std::nullopt;
  }
  FollowStep s;
  s.action = report.plan(0);
  const v1::PlanAction& a = s.action;
  s.concurrency = concurrency;
  if (a.kind() == "raise_client_concurrency") {
    s.concurrency = std::max(concurrency, static_cast<int>(std::lround(a.to())));
  }
  s.change = PlanOptionsRequest(a, now, &s.request);
  return s;
}

FollowedPlan CompareFollowed(const FollowStep& step, const v1::DiagnosticsReport* after) {
  FollowedPlan f;
  const v1::PlanAction& a = step.action;
  f.action = a.what();
  f.kind = a.kind();
  f.change = step.change;
  f.predicted = a.tokens_per_s_after();
  f.expected_error = a.expected_error();
  f.outside_measured = a.outside_measured();
  f.untrusted = a.untrusted();
  // The prediction's own basis, as the server's plan tracker measures it: tokens requests got
  // per second of the steps that carry decodes (with the request mix) or of pure decode steps,
  // idle time left out (an open loop's idle is the clients', not the plan's).
  const bool mix = a.prefill_share() > 0;
  f.metric = mix ? "decoding_step_tokens_per_s" : "decode_step_tokens_per_s";
  if (after == nullptr) {
    f.note = "the follow-up phase has no diagnosis";
    return f;
  }
  const v1::Profile& p = after->profile();
  f.measured = mix ? p.decoding_step_tokens_per_s() : p.decode_step_tokens_per_s();
  f.delivered = p.output_tokens_per_s();
  if (f.measured > 0) {
    f.error = f.predicted / f.measured - 1;
  } else {
    f.note = "the follow-up window measured no tokens";
  }
  return f;
}

v1::UpdateEngineOptionsRequest RestoreRequest(const FollowStep& step,
                                              const v1::EngineOptions& before) {
  v1::UpdateEngineOptionsRequest r;
  if (step.request.has_max_num_seqs()) r.set_max_num_seqs(before.max_num_seqs());
  if (step.request.has_max_num_batched_tokens()) {
    r.set_max_num_batched_tokens(before.max_num_batched_tokens());
  }
  if (step.request.has_cuda_graphs()) r.set_cuda_graphs(before.cuda_graphs());
  return r;
}

}  // namespace saturn::clients
