// The engine's plain structs -> the saturn.v1 messages the Saturn service answers with, and
// the merge of an options update (requests go the other way through the request intake,
// server/request_intake.h). Pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "saturn/v1/saturn.pb.h"
#include "server/request_intake.h"

namespace saturn {

v1::FinishReason ToProto(FinishReason reason);
void ToProto(const EngineOptions& options, v1::EngineOptions* out);
void ToProto(const Usage& usage, v1::Usage* out);
void ToProto(const RequestTimings& timings, v1::RequestTimings* out);
void ToProto(const PositionLogprobs& logprobs, v1::PositionLogprobs* out);

// Overlays the fields set in `req` on `current`.
EngineOptions MergeOptions(const EngineOptions& current, const v1::UpdateEngineOptionsRequest& req);

// Everything GetServerInfo reports about a running engine.
void FillServerInfo(const Engine& engine, const PromptLimits& limits,
                    const std::string& listen_address, v1::ServerInfo* out);

}  // namespace saturn
