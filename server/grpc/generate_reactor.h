// The Generate stream: a grpc::ServerWriteReactor fed by the engine's EventCallback.
//
//   engine event thread: OnEvent -> build delta/final -> queue (mutex) -> StartWrite if idle
//   gRPC thread:   OnWriteDone -> next queued message ... -> Finish(status)
//   OnCancel (client cancel, deadline) -> Engine::Cancel -> final event -> Finish(CANCELLED)
//   shutdown after grace (ServingState::AbortAll) -> Engine::Cancel -> Finish(UNAVAILABLE)
//
// Finish is called only after the engine's final event (or when the request never reached
// the engine), so OnDone -- which deletes the reactor -- always comes after the last engine
// callback. The state the engine callback touches is shared (std::shared_ptr) all the same,
// so no callback can outlive it. Nothing here blocks the engine's event thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "engine/engine.h"
#include "saturn/v1/saturn.pb.h"
#include "server/diag/request_metrics.h"
#include "server/grpc/write_pump.h"
#include "server/serving_state.h"

namespace saturn {

// Writes serialized saturn.v1.GenerateResponse messages (the service's methods are raw; see
// saturn_service.h).
class GenerateReactor final : public PumpedReactor {
 public:
  // Submits `request` to the engine. When the server is draining or Submit fails (queue full,
  // invalid request, engine shut down) the stream finishes at once with that status.
  // `metrics` (optional) sees the gaps between token events and the final event.
  GenerateReactor(ServingState* state, Engine* engine, GenerateRequest request, bool want_text,
                  RequestMetrics* metrics = nullptr);
  // A stream that only returns `status` (request rejected before any engine work).
  static grpc::ServerWriteReactor<grpc::ByteBuffer>* Reject(const grpc::Status& status);

 private:
  struct Call;
  explicit GenerateReactor(std::shared_ptr<Call> call);
};

}  // namespace saturn
