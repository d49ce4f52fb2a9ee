// FetchDiagnosis (see diagnosis.h): a stub until proto/saturn/v1/diagnostics.proto exists.
#include "clients/diagnosis.h"

#include "absl/status/status.h"

namespace saturn::clients {

absl::StatusOr<std::string> FetchDiagnosis(const Connection& conn, const ServerWindow& window,
                                           double timeout_s) {
  (void)conn;
  (void)window;
  (void)timeout_s;
  return absl::UnimplementedError("this saturn-load build has no diagnostics client yet");
}

}  // namespace saturn::clients
