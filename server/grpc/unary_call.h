// Every unary handler of the Saturn and Diagnostics services: parse the raw request
// (INVALID_ARGUMENT with a reason, raw_message.h), check its fields, then RunUnary: find the
// engine (UNAVAILABLE while the model loads), hold a ServingState call token while the work
// runs where the service runs it, serialize the reply and finish. Each step finishes the
// reactor itself when it fails.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>

#include "server/grpc/raw_message.h"
#include "server/grpc/status_util.h"
#include "server/serving_state.h"

namespace saturn {

inline grpc::Status LoadingStatus() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "model is loading; retry when health reports SERVING");
}

// Parses `raw` into `request`; on failure finishes `reactor` INVALID_ARGUMENT and returns false.
inline bool ParseOrFinish(const grpc::ByteBuffer& raw, google::protobuf::Message* request,
                          grpc::ServerUnaryReactor* reactor) {
  absl::Status s = ParseRequest(raw, request);
  if (!s.ok()) reactor->Finish(ToGrpcStatus(s));
  return s.ok();
}

// The serving engine, or null after finishing `reactor` UNAVAILABLE while the model loads.
inline Engine* EngineOrFinish(const ServingState& state, grpc::ServerUnaryReactor* reactor) {
  Engine* engine = state.engine();
  if (engine == nullptr) reactor->Finish(LoadingStatus());
  return engine;
}

// Where a unary call's work runs: it runs `work` (now, or posted to a thread) and returns
// false when it cannot (that thread has stopped).
using UnaryPoster = std::function<bool(std::function<void()> work)>;

// Runs the work on the handler's own thread: for work that never blocks on the engine.
inline bool RunNow(std::function<void()> work) {
  work();
  return true;
}

// Runs `work(engine)` through `post` under a call token, then (when OK) serializes `reply`
// into `response` and finishes `reactor` with its status. Finishes at once with UNAVAILABLE
// when the server is loading or draining. A call its client gave up on (deadline, cancel)
// before its turn came is finished without the work.
inline void RunUnary(ServingState* state, const UnaryPoster& post,
                     grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                     const std::shared_ptr<google::protobuf::Message>& reply,
                     grpc::ByteBuffer* response, const std::function<grpc::Status(Engine*)>& work) {
  const grpc::Status shutting_down(grpc::StatusCode::UNAVAILABLE, "server shutting down");
  if (EngineOrFinish(*state, reactor) == nullptr) return;
  std::optional<int64_t> token = state->BeginCall(nullptr);
  if (!token.has_value()) {
    reactor->Finish(shutting_down);
    return;
  }
  const int64_t t = *token;
  const bool posted = post([=] {
    Engine* engine = state->engine();
    const grpc::Status status = engine == nullptr ? shutting_down
                                : context->IsCancelled()
                                    ? grpc::Status(grpc::StatusCode::CANCELLED,
                                                   "the client gave up before the call's turn came")
                                    : work(engine);
    if (status.ok()) SerializeResponse(*reply, response);
    reactor->Finish(status);
    state->EndCall(t);
  });
  if (!posted) {
    reactor->Finish(shutting_down);
    state->EndCall(t);
  }
}

}  // namespace saturn
