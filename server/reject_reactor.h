// RejectReactor: a server-streaming reactor that only returns a status, for a call rejected
// before any work starts. Finishes in its constructor and deletes itself in OnDone; it never
// writes a message.
#pragma once

#include <grpcpp/grpcpp.h>

namespace saturn {

template <typename Response>
class RejectReactor final : public grpc::ServerWriteReactor<Response> {
 public:
  explicit RejectReactor(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace saturn
