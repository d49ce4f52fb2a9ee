// Builds the analyzer's context from a live Engine (its info(), options, probe, counters).
// Thread-safe as the Engine getters it calls.
#pragma once

#include "engine/diag/analyzer.h"
#include "engine/engine.h"

namespace saturn {

AnalyzerContext ContextFromEngine(const Engine& engine);

}  // namespace saturn
