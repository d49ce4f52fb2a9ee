// ConnectTargets and WorkloadLimits (see session_targets.h).
#include "clients/load/session_targets.h"

#include "absl/strings/str_cat.h"
#include "clients/load/grpc_transport.h"

namespace saturn::clients {
namespace {

// Token ids a synthetic prompt draws when the vocabulary is unknown: [3, 256), the byte
// tokens of byte-level vocabularies and Llama's byte fallback, past the usual specials 0-2.
constexpr int kUnknownVocabIdLimit = 256;

}  // namespace

absl::StatusOr<RunTargets> ConnectTargets(const LoadConfig& c) {
  RunTargets t;
  absl::StatusOr<std::shared_ptr<const ChannelSecurity>> security =
      ChannelSecurity::Load(c.security);
  if (!security.ok()) return security.status();
  std::vector<std::string> grpc_targets;
  if (!c.openai()) {
    grpc_targets = c.target;
  } else if (!c.diag_target.empty()) {
    grpc_targets = {c.diag_target};
  }
  if (!grpc_targets.empty()) {
    absl::StatusOr<std::unique_ptr<Connection>> conn =
        Connection::Connect(grpc_targets, c.connect_timeout_s, *std::move(security));
    if (!conn.ok()) {
      if (!c.openai()) return conn.status();
      return absl::Status(conn.status().code(),
                          absl::StrCat("--diag_target: ", conn.status().message()));
    }
    t.saturn = *std::move(conn);
    if (!c.openai()) t.grpc = std::make_unique<GrpcTransport>(*t.saturn);
  }
  if (c.openai() || c.compare_api()) {
    OpenAiOptions o;
    o.targets = c.openai() ? c.target : c.openai_target;
    o.flag = c.openai() ? "--target" : "--openai_target";
    o.security = c.security;
    o.model_name = c.model_name;
    o.connect_timeout_s = c.connect_timeout_s;
    o.return_token_ids = t.saturn != nullptr;  // the HTTP front of the Saturn it connected to
    absl::StatusOr<std::unique_ptr<OpenAiTransport>> http = OpenAiTransport::Connect(o);
    if (!http.ok()) return http.status();
    t.openai = *std::move(http);
  }
  if (t.saturn == nullptr) {
    t.diagnosis_skipped =
        "diagnosis skipped: --api openai drives a server that may not be Saturn; give "
        "--diag_target host:port (Saturn's gRPC address) to have Saturn diagnose each phase";
  }
  return t;
}

ModelLimits WorkloadLimits(const RunTargets& t, std::string* note) {
  ModelLimits limits;
  if (t.saturn != nullptr) {
    const v1::ServerInfo& info = t.saturn->targets()[0].info;
    limits.vocab_size = info.model().vocab_size();
    limits.max_model_len = info.limits().max_model_len();
    limits.avoid_token_ids = {info.model().bos_token_id(), info.model().eos_token_id()};
    return limits;
  }
  // Any id a JSONL file gives is the file's business; synthetic ones stay among byte tokens.
  limits.vocab_size = 1 << 30;
  limits.random_id_limit = kUnknownVocabIdLimit;
  limits.avoid_token_ids = {0, 1, 2};
  limits.max_model_len = t.openai->max_model_len() > 0 ? t.openai->max_model_len() : 1 << 30;
  *note =
      "the server's vocabulary is unknown (not Saturn's gRPC API), so synthetic prompts use the "
      "byte token ids 3..255";
  if (t.openai->max_model_len() == 0) {
    absl::StrAppend(note,
                    " and are not fitted to a context (GET /v1/models gives no max_model_len)");
  }
  return limits;
}

}  // namespace saturn::clients
