// The security flags every client tool takes (--tls_ca, --tls_cert, --tls_key,
// --tls_server_name, --auth_token_file; clients/common/channel_security.h), defined once here so
// that saturn-load and saturn-diag spell and document them alike. The tools' other flags live in
// their own clients/tools/<name>.cc.
#pragma once

#include "clients/common/channel_security.h"

namespace saturn::clients {

// The parsed values of the security flags (after absl::ParseCommandLine).
ChannelSecurityFlags SecurityFlagsFromCommandLine();

}  // namespace saturn::clients
