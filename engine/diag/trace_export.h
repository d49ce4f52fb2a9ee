// Chrome trace-event JSON of step records, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one process "saturn", track "host" (a slice per step with
// schedule / prepare / issue / postprocess children) and track "device" (a slice per step
// with one child per op carrying its FLOPs and bytes). Complete events ("ph": "X"), ts and
// dur in microseconds from the first step, children clamped inside their parents and
// siblings kept in order, so the nesting is exact. Pure; uses nlohmann/json.
#pragma once

#include <string>
#include <vector>

#include "engine/measure/step_record.h"

namespace saturn {

// The last `max_steps` of `steps` (all when 0) as a trace JSON document.
std::string ExportChromeTrace(const std::vector<StepRecord>& steps, size_t max_steps = 0);

}  // namespace saturn
