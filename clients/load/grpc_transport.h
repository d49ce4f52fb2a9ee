// saturn-load's gRPC transport (transport.h): each request is one saturn.v1.Saturn/Generate
// stream on the Connection's round-robin channel, asking for tokens (OUTPUT_FORMAT_TOKENS), run
// by gRPC's callback API (ClientReadReactor), so hundreds of streams share gRPC's few threads.
// The record takes each delta's arrival and token count and the final message's usage and
// server timings (the window the diagnosis is asked about).
#pragma once

#include <memory>
#include <string>

#include "clients/common/connection.h"
#include "clients/load/transport.h"

namespace saturn::clients {

class GrpcTransport : public Transport {
 public:
  // `conn` must outlive the transport and its calls.
  explicit GrpcTransport(const Connection& conn) : conn_(conn) {}
  std::unique_ptr<StreamCall> NewCall(CallRequest request, LoadClock::time_point t0,
                                      CallDone done) const override;
  std::string api() const override { return "grpc"; }
  std::string target() const override;

 private:
  const Connection& conn_;
};

}  // namespace saturn::clients
