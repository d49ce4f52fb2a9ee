// saturn-load --follow_plan: after a phase, its server's top plan action is followed once. A
// server-side action's engine options are sent with UpdateEngineOptions (the server then
// tracks it, as after saturn-diag apply); a client-side one (raise client concurrency) sets the
// next phase's concurrency (and max_num_seqs where the action raises it too). The same phase
// runs again, and the plan's predicted tokens/s is set beside what the server measured over the
// follow-up phase's window, on the plan's own basis: tokens requests got per second of the
// steps carrying decodes where the prediction has the request mix in it (prefill_share > 0),
// of pure decode steps otherwise (docs/DIAGNOSTICS.md "Plan").
#pragma once

#include <optional>
#include <string>

#include "saturn/v1/diagnostics.pb.h"
#include "saturn/v1/saturn.pb.h"

namespace saturn::clients {

// What the follow-up phase needs: the action, the concurrency to run at, the options to send
// ("" change: none differ from those in force).
struct FollowStep {
  v1::PlanAction action;
  int concurrency = 0;
  v1::UpdateEngineOptionsRequest request;
  std::string change;  // e.g. "max_num_seqs 4 -> 13"
};

// The prediction against the follow-up phase's window.
struct FollowedPlan {
  std::string action;  // the action's `what`
  std::string kind;
  std::string change;  // options sent ("" none)
  // The prediction's basis (Profile): "decoding_step_tokens_per_s" (with the request mix) or
  // "decode_step_tokens_per_s" (decode-only).
  std::string metric;
  double predicted = 0;  // tokens_per_s_after
  double measured = 0;   // the server's figure over the follow-up window (0: none)
  double delivered = 0;  // output tokens/s over the whole window, idle included
  double error = 0;      // predicted / measured - 1
  double expected_error = 0;
  bool outside_measured = false;  // the prediction reached past the measured step shapes
  std::string untrusted;          // why the plan stated no trusted prediction ("" it did)
  std::string note;               // why nothing was measured
};

// The step to take after a phase diagnosed as `report` that ran at `concurrency` with `now`
// in force; nullopt when its plan has no action or its top action needs a restart (`why`
// says so).
std::optional<FollowStep> NextFollowStep(const v1::DiagnosticsReport& report, int concurrency,
                                         const v1::EngineOptions& now, std::string* why);

// The prediction of `step` against the follow-up phase's diagnosis.
FollowedPlan CompareFollowed(const FollowStep& step, const v1::DiagnosticsReport* after);

// The request that puts `before` back (every field that `step` changed).
v1::UpdateEngineOptionsRequest RestoreRequest(const FollowStep& step,
                                              const v1::EngineOptions& before);

}  // namespace saturn::clients
