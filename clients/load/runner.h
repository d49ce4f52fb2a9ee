// One load phase: sends a workload's requests to the server(s) in a closed loop (a fixed
// number in flight) or an open loop (Poisson arrivals), and records each stream's timings
// on the client's steady clock. The streams go through a Transport (transport.h: gRPC or an
// OpenAI-compatible HTTP API), which the phase does not look into; one dispatcher thread (the
// caller's) decides when to send. Computes no statistics (stats.h does).
//
// Bounds: the phase stops sending after num_requests requests and/or once duration has
// passed, extended until min_measure_s of load after warm-up (PhaseSettings); requests already in
// flight then run to their end (each has request_timeout). It also stops sending when a request is
// rejected for good (INVALID_ARGUMENT, FAILED_PRECONDITION, UNIMPLEMENTED, PERMISSION_DENIED,
// UNAUTHENTICATED, NOT_FOUND, OUT_OF_RANGE; HTTP 400, 401, 403, 404, 422), after max_errors
// failures, or when *interrupt turns true (in-flight streams are then cancelled). Every request
// sent has a record: sent == records.size().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "clients/common/stats.h"
#include "clients/load/transport.h"
#include "clients/load/workload.h"

namespace saturn::clients {

struct PhaseSettings {
  bool open_loop = false;
  int concurrency = 1;       // closed loop: requests in flight
  double request_rate = 0;   // open loop: requests per second (inf: all at once)
  int64_t num_requests = 0;  // 0: no count bound
  double duration_s = 0;     // 0: no time bound
  double request_timeout_s = 600;
  int64_t max_errors = 100;  // 0: never stop for errors
  uint64_t seed = 0;         // arrivals and per-request sampling seeds
  int64_t first_item = 0;    // workload index of the first request (phases may share items)
  // Measure enough: once a bound is reached, keep sending until the load has been held for
  // min_measure_s after the warm-up (the warm_up_requests-th successful completion), at most
  // 3 * min_measure_s past the bound. 0: stop at the bound. Not for an open loop at rate inf
  // (a burst has no steady state to extend).
  double min_measure_s = 0;
  int warmup_requests = 0;
  float temperature = 0;
  bool ignore_eos = true;
  std::string label;  // goes into client_request_id
};

struct Progress {
  int64_t sent = 0, completed = 0, errors = 0, in_flight = 0;
  double elapsed_s = 0;
  bool sending_done = false;
};

struct PhaseOutcome {
  std::vector<RequestRecord> records;  // in order of sending
  double start_unix_s = 0;             // wall clock at the phase's start (for reports)
  double elapsed_s = 0;
  // Why sending stopped early ("" when a bound was reached): a rejected request, too many
  // errors, or an interrupt.
  std::string stop_reason;
  bool interrupted = false;
  // Set when sending went on past --num_requests / --duration to meet min_measure_s (or gave
  // up on it): what was done and why.
  std::string measure_note;
};

using ProgressFn = std::function<void(const Progress&)>;

// Runs one phase and returns when every request sent has ended and its stream object (with
// its gRPC ClientContext or HTTP thread) has been destroyed on the calling thread. `progress`
// (optional) is called from the calling thread about every 100 ms and once at the end.
PhaseOutcome RunPhase(const Transport& transport, const Workload& workload,
                      const PhaseSettings& settings, const ProgressFn& progress,
                      const std::atomic<bool>* interrupt);

// Stream objects alive in this process (all phases, both transports): 0 whenever no RunPhase
// is running.
inline int64_t LiveGenerateCalls() { return LiveStreamCalls(); }

// Whether a failed request's status means the server will reject every such request.
bool IsPermanentRejection(const std::string& status);

}  // namespace saturn::clients
