// saturn-diag analyze FILE: a recording (`saturn-diag record`, engine/diag/recording.h) judged
// offline by the server's own diagnostics session, printed as `get` prints a report, with the
// verdict the server gave when it was recorded. A recording from another build may be judged
// differently (that is what re-judging is for): the output says so, the exit code does not.
// The one client file that links the engine's analyzer (saturn_diag).
#pragma once

#include <ostream>

#include "clients/diag/commands.h"

namespace saturn::clients {

// o.input: the recording; o.json: the report as JSON with the recorded verdict beside it.
int RunAnalyze(const DiagOptions& o, std::ostream& out, std::ostream& err);

}  // namespace saturn::clients
