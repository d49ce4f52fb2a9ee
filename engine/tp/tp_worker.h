// The tensor-parallel session (tp_protocol.h) from both ends: rank 0's engine starts one per
// engine life and agrees with the workers that every shard loaded; a worker process
// (saturn-server's ranks above 0) serves sessions until rank 0 says kExit. Workers need no
// scheduler, requests or tokenizer: what to load and every step come from rank 0.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/model_runner.h"
#include "kernels/comm/communicator.h"

namespace saturn {

// What a worker needs to build its shard as rank 0 builds its own.
struct TpStartConfig {
  std::string model;
  uint64_t weight_seed = 0;
  std::string backend, weight_dtype, kv_cache_dtype, batch_invariant, cuda_kernels;
  int num_threads = 0;
  RunnerConfig runner;  // tp_rank is each rank's own
  // Test-only: rank 1 sleeps this long in each step (SATURN_TP_TEST_DELAY_US on rank 0, read
  // where it starts the session), so tests can make one rank slow.
  int64_t test_delay_us = 0;
};

// Rank 0: kStart and the config to every worker.
absl::Status SendTpStart(Communicator* comm, const TpStartConfig& config);
// Every rank, once its own shard is loaded (or failed, `mine`): OK where every rank is ready,
// else `mine` where it failed, else an error naming the first rank that failed (its own log
// says why). A collective.
absl::Status AgreeTpStart(Communicator* comm, const absl::Status& mine);
// Rank 0, leaving: the workers leave too.
absl::Status SendTpExit(Communicator* comm);
// SendTpExit when it goes out of scope, where `comm` is set and this is rank 0 of a group:
// declared after the world and before the engine, so every path out of a main tells the
// workers after the engine ended its session.
struct TpExitOnLeave {
  Communicator* comm = nullptr;
  ~TpExitOnLeave() {
    if (comm != nullptr && comm->rank() == 0 && comm->size() > 1) (void)SendTpExit(comm);
  }
};

// A worker's life: sessions until kExit (OK), or the first error of the group's transport.
// A session's own failure to load is reported through AgreeTpStart and the worker waits for
// the next one. Logs each session's shard to stderr, prefixed with `log_prefix`.
absl::Status RunTpWorker(Communicator* comm, const std::string& log_prefix);

}  // namespace saturn
