// The WatchDiagnostics stream: a grpc::ServerWriteReactor paced by the diagnostics service's
// TimerThread, never by a gRPC thread.
//
//   timer thread: Tick -> (every interval) build report -> StartWrite if no write in flight
//                 -> post the next Tick (at most 200 ms later, to notice shutdown promptly)
//   gRPC thread:  OnWriteDone -> Finish if one is pending
//   OnCancel -> Finish(CANCELLED); server draining (seen by Tick) -> Finish(UNAVAILABLE);
//   ServingState::AbortAll -> Finish(UNAVAILABLE)
//
// The engine is read only while a Tick holds its own ServingState call token, so shutdown
// never frees the engine under a report being built. Finish waits for a write in flight;
// OnDone deletes the reactor, after which Ticks find it gone and stop.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "saturn/v1/diagnostics.pb.h"
#include "server/diag/diagnostics_state.h"
#include "server/grpc/write_pump.h"
#include "server/serving_state.h"
#include "server/timer_thread.h"

namespace saturn {

// Writes each DiagnosticsReport serialized (the method is registered raw: diagnostics_service.h).
class WatchReactor final : public PumpedReactor {
 public:
  // Starts the stream: the first report at once, then one every `interval_ms`. `slot` is
  // held until the stream is done (the service's count of open streams).
  WatchReactor(ServingState* state, DiagnosticsState* diag, TimerThread* timer,
               double window_seconds, int interval_ms, bool include_json,
               std::shared_ptr<void> slot);

 private:
  struct Call;
  WatchReactor(std::shared_ptr<Call> call, std::shared_ptr<void> slot);
  std::shared_ptr<void> slot_;
};

// A stream that only returns `status`.
grpc::ServerWriteReactor<grpc::ByteBuffer>* RejectWatch(const grpc::Status& status);

}  // namespace saturn
