// The opening every unary handler of the Saturn and Diagnostics services shares: parse the raw
// request (INVALID_ARGUMENT with a reason, raw_message.h), then find the engine (UNAVAILABLE
// while the model loads). Each step finishes the reactor itself when it fails.
#pragma once

#include <grpcpp/grpcpp.h>

#include "server/raw_message.h"
#include "server/serving_state.h"
#include "server/status_util.h"

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

}  // namespace saturn
