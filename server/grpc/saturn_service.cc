// SaturnService's unary handlers (Generate, the streaming one, lives with its reactor in
// generate_reactor.cc). Handlers never block a gRPC thread on the engine: Generate hands off to
// the engine loop through Submit, and UpdateEngineOptions (which waits for a step boundary) runs
// on the service's one BoundedWorker, registered with ServingState so shutdown waits for it
// (or, still queued, ends it with UNAVAILABLE).
#include "server/grpc/saturn_service.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/render/report_proto.h"
#include "server/diag/diagnostics_request.h"
#include "server/grpc/proto_convert.h"
#include "server/grpc/raw_message.h"
#include "server/grpc/status_util.h"
#include "server/grpc/unary_call.h"

namespace saturn {
SaturnService::SaturnService(ServingState* state, DiagnosticsState* diag)
    : state_(state), diag_(diag) {}

grpc::ServerUnaryReactor* SaturnService::GetServerInfo(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetServerInfoRequest request;
  if (!ParseOrFinish(*raw, &request, reactor)) return reactor;
  auto info = std::make_shared<v1::ServerInfo>();
  RunUnary(state_, RunNow, context, reactor, info, response, [this, info](Engine* engine) {
    FillServerInfo(*engine, state_->intake()->limits(), state_->listen_address(), info.get());
    if (diag_ != nullptr) FillCalibration(diag_->session(), info->mutable_calibration());
    ToProto(engine->info().graphs, info->mutable_cuda_graphs());
    return grpc::Status::OK;
  });
  return reactor;
}

grpc::ServerUnaryReactor* SaturnService::UpdateEngineOptions(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* raw,
                                                             grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::UpdateEngineOptionsRequest request;
  if (!ParseOrFinish(*raw, &request, reactor)) return reactor;
  Engine* engine = EngineOrFinish(*state_, reactor);
  if (engine == nullptr) return reactor;
  // The job's id once queued: shutdown after the grace period takes a job that has not
  // started off the queue (it ends UNAVAILABLE); a running one ends with the engine.
  auto job_id = std::make_shared<std::atomic<int64_t>>(0);
  std::optional<int64_t> token = state_->BeginCall([this, job_id] {
    if (const int64_t id = job_id->load(); id != 0) options_worker_.Cancel(id);
  });
  if (!token.has_value()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
    return reactor;
  }
  const int64_t t = *token;
  std::optional<int64_t> id = options_worker_.Submit(
      [this, engine, request, response, reactor, t] {
        const EngineOptions before = engine->options();
        absl::StatusOr<EngineOptions> applied =
            engine->UpdateOptions(MergeOptions(before, request));
        // In force from the step boundary UpdateOptions waited for: a plan action it matches
        // is tracked from here.
        if (applied.ok() && diag_ != nullptr)
          diag_->session().OnOptionsApplied(before, *applied, NowUs());
        if (applied.ok()) {
          v1::UpdateEngineOptionsResponse reply;
          ToProto(*applied, reply.mutable_options());
          SerializeResponse(reply, response);
        }
        reactor->Finish(ToGrpcStatus(applied.status()));
        // Then measure the step shapes the new options opened (the caller has its answer;
        // serving pauses for the probe as at start-up).
        if (applied.ok() && diag_ != nullptr)
          diag_->session().ReprobeAfterOptions(engine, before, *applied);
        state_->EndCall(t);
      },
      [this, reactor, t] {
        reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                     "server shutting down: the options update was not applied"));
        state_->EndCall(t);
      });
  if (!id.has_value()) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("UpdateEngineOptions: ", options_worker_.capacity(),
                     " updates are already waiting for a step boundary; retry later")));
    state_->EndCall(t);
    return reactor;
  }
  job_id->store(*id);
  return reactor;
}

}  // namespace saturn
