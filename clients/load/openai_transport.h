// saturn-load's transport for OpenAI-compatible servers (transport.h): each request is one
// POST /v1/completions with stream: true (openai_wire.h builds and reads it), sent by
// cpp-httplib's blocking client on a thread of its own, its body read as server-sent events
// (sse.h) as the bytes arrive. Several targets take requests in turn (round-robin per
// request, as the gRPC channel does). Each target keeps its idle keep-alive clients for the
// next request, so a closed loop reuses its connections as gRPC reuses its channel.
//
// Servers close kept-alive connections when they like (llama.cpp's server: "Keep-Alive:
// timeout=5, max=100"), and a request sent on one just as it closes fails before any byte of
// its answer. Such a request, on a reused connection, is sent once more on a fresh one, as
// HTTP clients do (httpx, urllib3); only a stream that broke after its answer began, or a
// fresh connection that failed, counts as broken (STREAM_BROKEN, UNAVAILABLE).
//
// Security, with the flags the gRPC path takes: https:// targets check the server's
// certificate against --tls_ca (else the system's CAs), present --tls_cert/--tls_key, and check
// --tls_server_name when given; --auth_token_file is sent as "Authorization: Bearer <token>".
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/common/channel_security.h"
#include "clients/load/openai_wire.h"
#include "clients/load/transport.h"

namespace httplib {
class Client;
}

namespace saturn::clients {

struct OpenAiOptions {
  std::vector<std::string> targets;  // URLs (ParseHttpTarget)
  std::string flag = "--target";     // the flag the targets came from, for errors
  ChannelSecurityFlags security;
  std::string model_name;  // "" -> the first id GET /v1/models lists on the first target
  double connect_timeout_s = 10;
  // Ask for each chunk's token ids (vLLM's return_token_ids; Saturn has it), so that chunks
  // carrying several tokens (or none of the text yet: a partial UTF-8 character) count them
  // all. Asked only of servers known to be Saturn: this flag (a gRPC connection to it), or a
  // /v1/models entry owned_by "saturn"; another server might refuse an unknown field.
  bool return_token_ids = false;
};

class OpenAiTransport : public Transport {
 public:
  // Parses the targets, reads the token file and asks each target's GET /v1/models (retried
  // while the server is not up yet, until connect_timeout_s). INVALID_ARGUMENT for bad flags,
  // UNAVAILABLE for a server that does not answer; the message names the flag and target.
  static absl::StatusOr<std::unique_ptr<OpenAiTransport>> Connect(const OpenAiOptions& options);
  ~OpenAiTransport() override;

  std::unique_ptr<StreamCall> NewCall(CallRequest request, LoadClock::time_point t0,
                                      CallDone done) const override;
  std::string api() const override { return "openai"; }
  std::string target() const override;

  const std::vector<HttpTarget>& targets() const { return targets_; }
  const std::string& model() const { return model_; }
  // The model's context as /v1/models gives it (vLLM, Saturn); 0 when not given.
  int max_model_len() const { return max_model_len_; }

  // For the calls (thread-safe): a client of target `i`, idle (`*reused` true) or new, and
  // its return after a request that ended cleanly.
  std::unique_ptr<httplib::Client> Acquire(size_t i, bool* reused) const;
  void Release(size_t i, std::unique_ptr<httplib::Client> client) const;
  // A client of target `i` on a connection of its own, never an idle one.
  std::unique_ptr<httplib::Client> NewClient(size_t i, double read_timeout_s) const;

 private:
  OpenAiTransport() = default;

  OpenAiOptions options_;
  std::vector<HttpTarget> targets_;
  std::string token_;
  std::string model_;
  int max_model_len_ = 0;
  bool return_token_ids_ = false;
  mutable std::atomic<uint64_t> next_target_{0};
  mutable std::mutex mu_;
  mutable std::vector<std::vector<std::unique_ptr<httplib::Client>>> idle_;  // per target
};

}  // namespace saturn::clients
