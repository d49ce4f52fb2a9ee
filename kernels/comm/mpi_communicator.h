// The Communicator over MPI (the standard's C API only, so Open MPI and MPICH both build it):
// ranks are the processes a launcher started (`mpirun -np N`), on one host or several.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/comm/communicator.h"

namespace saturn {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI (threads: the engine thread makes the calls, not main) for this process
  // and returns its world. A process started without a launcher is a world of one. MPI is
  // finalised when the communicator is destroyed; call once per process.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Init(int* argc, char*** argv);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return transport_; }
  bool single_host() const override { return single_host_; }

  absl::Status AllReduceSum(float* data, int64_t count) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::StatusOr<std::vector<int64_t>> AllGather(int64_t value) override;
  absl::StatusOr<std::vector<std::string>> Gather(const std::string& bytes, int root) override;
  absl::Status GatherFloats(const float* send, const std::vector<int64_t>& counts, float* recv,
                            int root) override;

  [[noreturn]] void Abort(int code) override;  // MPI_Abort

 private:
  MpiCommunicator() = default;

  int rank_ = 0, size_ = 1;
  bool single_host_ = true;
  std::string transport_;
  void* comm_ = nullptr;         // MPI_Comm, a duplicate of MPI_COMM_WORLD (mpi.h stays in the .cc)
  std::vector<float> gathered_;  // AllReduceSum's scratch for more than two ranks
};

}  // namespace saturn
