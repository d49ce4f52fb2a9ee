// Where a tensor-parallel step's time goes between ranks. Each rank logs, per step it computed,
// the step's span and the time it spent in each collective (TpStepEntry); rank 0 gathers the
// workers' logs when a report is built (ModelRunner::CollectTpStats), not on the hot path, and
// CombineTpLogs matches them by step. Clocks need not agree: for each collective, the least time
// any rank spent in it is the transfer (the last rank to arrive waits for no one), and a rank's
// time beyond that is its wait for slower ranks (POP's transfer vs serialisation efficiency,
// co-design.pop-coe.eu/metrics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saturn {

struct TpStepEntry {
  int64_t seq = 0;             // the step's number in the group (rank 0 numbers what it sends)
  double start_us = 0;         // rank 0's clock; 0 on workers (their clocks are their own)
  double step_us = 0;          // the forward pass's span on this rank
  std::vector<float> comm_us;  // each collective of the step, in issue order
  // The rank's compute threads over the step (schedstat): time on a core, and runnable but
  // waiting for one; both 0 where Linux does not expose them.
  float run_us = 0, wait_us = 0;
};

// A log as bytes and back (what the workers send rank 0). Unpack returns false on bytes that are
// not a log.
std::string PackTpLog(const std::vector<TpStepEntry>& entries);
bool UnpackTpLog(const std::string& bytes, std::vector<TpStepEntry>* entries);

struct TpRankStats {
  double step_us = 0;                    // summed over the window's steps
  double comm_us = 0;                    // in collectives
  double wait_us = 0;                    // of comm_us, beyond the collectives' transfer time
  double compute_us = 0;                 // step_us - comm_us
  double run_us = 0, sched_wait_us = 0;  // its threads' schedstat over the steps
  // Of the time its threads were runnable, the share they had a core; -1 where not measured.
  double RunShare() const {
    return run_us + sched_wait_us > 0 ? run_us / (run_us + sched_wait_us) : -1;
  }
};

// A window of a tensor-parallel group (ranks 0: not tensor parallel, or nothing logged).
struct TpStats {
  int ranks = 0;
  std::string transport;    // Communicator::transport()
  bool single_host = true;  // every rank on one host: they share its memory bandwidth
  int64_t steps = 0;        // steps every rank logged
  int64_t collectives = 0;  // summed over those steps
  double transfer_us = 0;   // summed over the collectives: the least any rank spent in each
  std::vector<TpRankStats> per_rank;

  // Mean over ranks of compute time / the largest (POP's load balance); 1 where balanced.
  double LoadBalance() const;
  // The rank that computed longest, and how much longer than the one that computed least.
  int SlowestRank() const;
  double SlowestOverFastest() const;
  // Of all ranks' collective time, the share spent waiting for slower ranks.
  double WaitShare() const;
  // Rank 0's collective time / its step time.
  double CommShare() const;
};

// The steps of rank 0's log (logs[0]) that started in [begin_us, end_us], with every other rank's
// entry of the same seq; steps missing on some rank are left out.
TpStats CombineTpLogs(const std::vector<std::vector<TpStepEntry>>& logs, double begin_us,
                      double end_us);

}  // namespace saturn
