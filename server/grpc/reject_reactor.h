// RejectReactor: a server-streaming reactor that only returns a status, for a call rejected
// before any work starts. Finishes in its constructor and deletes itself in OnDone; it never
// writes a message.
#pragma once

#include <grpcpp/grpcpp.h>

#include "server/grpc/grpc_handoff.h"

namespace saturn {

template <typename Response>
class RejectReactor final : public grpc::ServerWriteReactor<Response> {
 public:
  explicit RejectReactor(const grpc::Status& status) {
    HandOffToGrpc publish(this);
    this->Finish(status);
  }
  void OnDone() override {
    CalledBackByGrpc(this);
    delete this;
  }
};

}  // namespace saturn
