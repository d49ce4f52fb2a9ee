// The UpdateEngineOptions request that applies a plan action: only the options the action
// changes from those in force, so the options afterwards are exactly the action's and the
// server can match the change to its plan (saturn-diag apply, saturn-load --follow_plan).
#pragma once

#include <string>

#include "saturn/v1/diagnostics.pb.h"
#include "saturn/v1/saturn.pb.h"

namespace saturn::clients {

// Fills `req` with the fields of `a`'s options that differ from `now`; returns them as text
// ("max_num_seqs 4 -> 13, cuda_graphs off -> on"), "" when none differ.
std::string PlanOptionsRequest(const v1::PlanAction& a, const v1::EngineOptions& now,
                               v1::UpdateEngineOptionsRequest* req);

}  // namespace saturn::clients
