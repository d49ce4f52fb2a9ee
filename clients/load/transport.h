// How one phase's requests reach a server, so that the runner (runner.h) never knows which
// API it drives: it asks a Transport for one streaming call per request, starts it, may
// cancel it, and learns of its end through the call's done callback, which hands over the
// call's RequestRecord (clients/common/stats.h) on the runner's clock.
//   grpc_transport.h    saturn.v1.Saturn/Generate through a Connection (gRPC callback API)
//   openai_transport.h  POST /v1/completions, server-sent events (cpp-httplib, a thread per call)
// A transport sends; it never computes statistics and never decides when to send.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "clients/common/stats.h"
#include "clients/load/workload.h"

namespace saturn::clients {

using LoadClock = std::chrono::steady_clock;

// One request, in the terms both APIs share.
struct CallRequest {
  int64_t index = 0;  // order of sending within the phase
  WorkItem item;
  float temperature = 0;
  int64_t seed = 0;
  bool ignore_eos = true;
  std::string client_request_id;
  double timeout_s = 600;  // deadline of the whole request
};

class StreamCall {
 public:
  StreamCall();
  virtual ~StreamCall();  // only after done has run (the runner destroys calls on its thread)
  StreamCall(const StreamCall&) = delete;
  StreamCall& operator=(const StreamCall&) = delete;
  // Sends the request and returns at once. Called once.
  virtual void Start() = 0;
  // Ends the call early, from any thread after Start; done still runs once.
  virtual void Cancel() = 0;
};

// Runs exactly once per started call, on any thread, with the call's record (times in seconds
// since `t0` of NewCall). The call's own code never touches the call after it returns.
using CallDone = std::function<void(StreamCall* call, RequestRecord record)>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Thread-safety: NewCall from one thread at a time (the runner's dispatcher).
  virtual std::unique_ptr<StreamCall> NewCall(CallRequest request, LoadClock::time_point t0,
                                              CallDone done) const = 0;
  virtual std::string api() const = 0;     // "grpc" or "openai" (the --api value)
  virtual std::string target() const = 0;  // what the phase drove, as the report names it
};

// Stream calls alive in this process (every transport, every phase): 0 whenever no phase runs.
int64_t LiveStreamCalls();

}  // namespace saturn::clients
