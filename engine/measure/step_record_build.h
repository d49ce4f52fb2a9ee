// How the engine fills a StepRecord after a step (engine/measure/step_record.h holds the record and
// the ring). The engine itself sets the step id and its host phases (schedule, postprocess)
// and the options in force; everything else comes from here. Engine thread only.
#pragma once

#include "engine/measure/step_record.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"

namespace saturn {

// What the step did, from its plan and the runner's output: prepare/issue/device times,
// sequences and tokens by kind, context, graph replay and padding, and per op class the
// count, FLOPs, bytes and timed device time. The op records move from `out` into `rec`.
void RecordStepWork(const StepPlan& plan, RunnerOutput* out, StepRecord* rec);

// The serving state once the step's results are applied: queue depth, running requests, KV
// blocks used and free.
void RecordServingState(const Scheduler& scheduler, StepRecord* rec);

}  // namespace saturn
