// The engine's command-line flags, defined once for every binary that builds an engine from
// them (saturn-server, saturn-bench-engine, saturn-bench-plan, saturn-bench-instrumentation):
// the model, the backend, its threads, dtypes and kernels. A binary that links
// saturn_engine_flags takes all of them; flags of one binary alone (the server's limits and
// queue, a bench's sweep) stay in its main. Never linked into the engine itself.
#pragma once

#include <string>

#include "absl/flags/declare.h"
#include "engine/engine.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(std::string, kv_cache_dtype);
ABSL_DECLARE_FLAG(std::string, batch_invariant);
ABSL_DECLARE_FLAG(std::string, cuda_kernels);
ABSL_DECLARE_FLAG(int, tensor_parallel);

namespace saturn {

// After the command line is parsed: an EngineConfig whose model, backend, num_threads
// (--threads), dtype, kv_cache_dtype, batch_invariant, cuda_kernels and tensor_parallel are the
// flags' values (the group itself, tp_comm, is the launcher's: the caller sets it),
// every other field EngineConfig's default. The values are checked where the engine starts
// (EngineConfig::Validate, CreateBackend), as if set in code.
EngineConfig EngineConfigFromFlags();

}  // namespace saturn
