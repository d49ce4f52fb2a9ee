// The engine-internal half of the step probe (engine/measure/step_probe.h): the function that
// drives the model runner and takes KV blocks. Only the engine thread (Engine::ProbeSteps) and
// runner tests call it; the engine's public face (engine.h) sees the options and results alone.
#pragma once

#include "absl/status/statusor.h"
#include "engine/block_manager.h"
#include "engine/measure/step_probe.h"

namespace saturn {

class ModelRunner;

// Times the probe steps on `runner` (with both graph settings where it captures graphs; the
// runner's setting is restored), taking blocks from `blocks` (returned before it returns).
// The caller guarantees no other step runs meanwhile.
absl::StatusOr<StepProbe> RunStepProbe(ModelRunner* runner, BlockManager* blocks, int max_model_len,
                                       const StepProbeOptions& options);

}  // namespace saturn
