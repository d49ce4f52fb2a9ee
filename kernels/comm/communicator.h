// A tensor-parallel group's collectives: the all-reduce the sharded layers need, the broadcast
// that carries each step's inputs from rank 0 to the workers, and the small exchanges of set-up.
// The CPU backend's AllReduce op (kernels/backend.h) calls it on host memory; MPI implements it
// (kernels/comm/mpi_communicator.h). Calls are collective: every rank of the group makes the
// same calls in the same order, from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace saturn {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What carries the collectives, for logs and reports, e.g. "Open MPI v4.1.4 (2 ranks)".
  virtual std::string transport() const = 0;
  // Whether every rank runs on this host (one shared memory, so ranks do not add bandwidth).
  virtual bool single_host() const = 0;

  // data[0, count) summed over the ranks, in place. The sum is taken in rank order on every
  // rank, so all ranks hold the same bits and the result does not depend on the library's
  // choice of algorithm.
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
  // Root's `bytes` at `data` copied to every rank's `data`.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `value`, indexed by rank, on every rank.
  virtual absl::StatusOr<std::vector<int64_t>> AllGather(int64_t value) = 0;
  // Rank r's counts[r] floats at `send` placed one after another in rank order at `recv` on
  // `root` (recv is unused elsewhere; counts are the same on every rank).
  virtual absl::Status GatherFloats(const float* send, const std::vector<int64_t>& counts,
                                    float* recv, int root) = 0;
  // Every rank's `bytes`, indexed by rank, on `root` (other ranks get an empty vector).
  virtual absl::StatusOr<std::vector<std::string>> Gather(const std::string& bytes, int root) = 0;
  // Ends every rank of the job at once: where a rank cannot go on with the others' collectives
  // (a step failed after they started it), waiting for each other would hang them all.
  [[noreturn]] virtual void Abort(int code) = 0;
};

}  // namespace saturn
