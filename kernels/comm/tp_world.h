// A binary's way into a tensor-parallel group: `--tensor_parallel N` with N > 1 joins the world
// an MPI launcher started (one process per rank), or says why there is none, naming the mpirun
// line. Header-only, keyed on SATURN_WITH_MPI, which a target defines where it links
// saturn_comm_mpi (saturn-server, saturn-bench-engine); without it every N > 1 is refused.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/comm/communicator.h"
#ifdef SATURN_WITH_MPI
#include "kernels/comm/mpi_communicator.h"
#endif

namespace saturn {

inline absl::StatusOr<std::unique_ptr<Communicator>> JoinTensorParallel(int ranks,
                                                                        const std::string& binary) {
  const std::string line =
      absl::StrCat("mpirun -np ", ranks, " ", binary, " --tensor_parallel ", ranks, " ...");
#ifdef SATURN_WITH_MPI
  auto world = MpiCommunicator::Init(nullptr, nullptr);
  if (!world.ok()) return world.status();
  if ((*world)->size() != ranks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--tensor_parallel: ", ranks, " ranks, one process each, started by an MPI launcher (",
        line, "); this process is in a world of ", (*world)->size()));
  }
  return std::unique_ptr<Communicator>(std::move(*world));
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "--tensor_parallel: ", ranks,
      " needs MPI, and this build has none (install Debian's libopenmpi-dev and openmpi-bin, "
      "rebuild, then run ",
      line, ")"));
#endif
}

}  // namespace saturn
