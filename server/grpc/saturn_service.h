// saturn.v1.Saturn on the gRPC callback API: Generate (a GenerateReactor per stream; the
// handler is defined with its reactor in generate_reactor.cc), GetServerInfo,
// UpdateEngineOptions. Holds no engine state of its own: everything comes
// from ServingState, so the service exists (answering UNAVAILABLE) before the model loads.
//
// The three methods are registered raw (grpc::ByteBuffer in and out; the same bytes on the
// wire) so that an unparseable request is INVALID_ARGUMENT with a reason (raw_message.h)
// rather than gRPC's empty UNIMPLEMENTED.
#pragma once

#include <grpcpp/grpcpp.h>

#include "saturn/v1/saturn.grpc.pb.h"
#include "server/bounded_worker.h"
#include "server/diag/diagnostics_state.h"
#include "server/serving_state.h"

namespace saturn {

using SaturnRawService =
    v1::Saturn::WithRawCallbackMethod_Generate<v1::Saturn::WithRawCallbackMethod_GetServerInfo<
        v1::Saturn::WithRawCallbackMethod_UpdateEngineOptions<v1::Saturn::Service>>>;

class SaturnService final : public SaturnRawService {
 public:
  // UpdateEngineOptions calls waiting for the options worker beyond which the call is
  // RESOURCE_EXHAUSTED.
  static constexpr int kMaxQueuedOptionUpdates = 64;

  // `diag` (optional): calibration for GetServerInfo, plan tracking on UpdateEngineOptions,
  // request metrics from Generate. Outlives the service.
  explicit SaturnService(ServingState* state, DiagnosticsState* diag = nullptr);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* raw,
                                          grpc::ByteBuffer* response) override;
  // Engine::UpdateOptions waits for the next step boundary, so the call runs on one
  // BoundedWorker (never a thread per call, never a gRPC thread); kMaxQueuedOptionUpdates
  // waiting calls beyond the running one are RESOURCE_EXHAUSTED. A waiting call is ended
  // with UNAVAILABLE by shutdown.
  grpc::ServerUnaryReactor* UpdateEngineOptions(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* raw,
                                                grpc::ByteBuffer* response) override;

 private:
  ServingState* state_;
  DiagnosticsState* diag_;
  // Runs UpdateEngineOptions' read-merge-apply, one at a time, so concurrent partial updates
  // compose.
  BoundedWorker options_worker_{kMaxQueuedOptionUpdates};
};

}  // namespace saturn
