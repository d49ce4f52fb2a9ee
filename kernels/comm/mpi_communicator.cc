// MPI collectives for tensor parallelism (mpi_communicator.h).
#include "kernels/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace saturn {
namespace {

MPI_Comm& Comm(void*& handle) { return *static_cast<MPI_Comm*>(handle); }

absl::Status MpiError(const char* call, int code) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  // A peer that died or left is what most errors here mean: the group cannot go on.
  return absl::UnavailableError(absl::StrCat(call, ": ", std::string(text, len)));
}

// Large messages go in pieces of at most INT_MAX elements (MPI counts are ints).
constexpr int64_t kMaxCount = INT_MAX / 2;

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Init(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::FailedPreconditionError("MPI: already initialised in this process");
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided); rc != MPI_SUCCESS) {
    return absl::UnavailableError("MPI_Init_thread failed");
  }
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MPI: the library gives thread level ", provided,
        "; tensor parallelism calls MPI from the engine thread and needs MPI_THREAD_SERIALIZED"));
  }
  c->comm_ = new MPI_Comm(MPI_COMM_NULL);
  MPI_Comm_dup(MPI_COMM_WORLD, &Comm(c->comm_));
  // Errors come back as codes (a peer's death becomes UNAVAILABLE) instead of aborting here.
  MPI_Comm_set_errhandler(Comm(c->comm_), MPI_ERRORS_RETURN);
  MPI_Comm_rank(Comm(c->comm_), &c->rank_);
  MPI_Comm_size(Comm(c->comm_), &c->size_);
  MPI_Comm local;
  MPI_Comm_split_type(Comm(c->comm_), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_size = 1;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  // Every rank must agree: the smallest host group decides.
  int min_local = local_size;
  MPI_Allreduce(&local_size, &min_local, 1, MPI_INT, MPI_MIN, Comm(c->comm_));
  c->single_host_ = min_local == c->size_;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);  // "Open MPI v4.1.4, package: ..." : its first part
  std::string_view v(version, static_cast<size_t>(len));
  v = v.substr(0, v.find_first_of(",\n"));
  c->transport_ = absl::StrCat(std::string(v), " (", c->size_, c->size_ == 1 ? " rank" : " ranks",
                               c->single_host_ ? ", one host" : "", ")");
  return c;
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != nullptr) {
    MPI_Comm_free(&Comm(comm_));
    delete static_cast<MPI_Comm*>(comm_);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiCommunicator::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return
}

absl::Status MpiCommunicator::AllReduceSum(float* data, int64_t count) {
  if (size_ == 1 || count == 0) return absl::OkStatus();
  if (size_ == 2) {
    // a + b == b + a in IEEE arithmetic: both ranks get the same bits from the library's sum.
    for (int64_t at = 0; at < count; at += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, count - at));
      if (int rc = MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, MPI_SUM, Comm(comm_));
          rc != MPI_SUCCESS) {
        return MpiError("MPI_Allreduce", rc);
      }
    }
    return absl::OkStatus();
  }
  // More ranks: the library's sum order depends on its algorithm, so gather every rank's part
  // and add them in rank order here.
  if (count * size_ > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce of ", count, " values over ", size_, " ranks: too large"));
  }
  gathered_.resize(static_cast<size_t>(count) * size_);
  if (int rc = MPI_Allgather(data, static_cast<int>(count), MPI_FLOAT, gathered_.data(),
                             static_cast<int>(count), MPI_FLOAT, Comm(comm_));
      rc != MPI_SUCCESS) {
    return MpiError("MPI_Allgather", rc);
  }
  for (int64_t i = 0; i < count; ++i) {
    float sum = gathered_[i];
    for (int r = 1; r < size_; ++r) sum += gathered_[static_cast<size_t>(r) * count + i];
    data[i] = sum;
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (size_ == 1) return absl::OkStatus();
  char* p = static_cast<char*>(data);
  for (size_t at = 0; at < bytes || (bytes == 0 && at == 0); at += kMaxCount) {
    const int n = static_cast<int>(std::min<size_t>(kMaxCount, bytes - at));
    if (int rc = MPI_Bcast(p + at, n, MPI_BYTE, root, Comm(comm_)); rc != MPI_SUCCESS) {
      return MpiError("MPI_Bcast", rc);
    }
    if (bytes == 0) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> MpiCommunicator::AllGather(int64_t value) {
  std::vector<int64_t> all(size_, value);
  if (size_ == 1) return all;
  if (int rc = MPI_Allgather(&value, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, Comm(comm_));
      rc != MPI_SUCCESS) {
    return MpiError("MPI_Allgather", rc);
  }
  return all;
}

absl::Status MpiCommunicator::GatherFloats(const float* send, const std::vector<int64_t>& counts,
                                           float* recv, int root) {
  if (static_cast<int>(counts.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gather: ", counts.size(), " counts for ", size_, " ranks"));
  }
  if (size_ == 1) {
    std::copy_n(send, counts[0], recv);
    return absl::OkStatus();
  }
  std::vector<int> n(size_), at(size_);
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    n[r] = static_cast<int>(counts[r]);
    at[r] = static_cast<int>(total);
    total += counts[r];
  }
  if (total > kMaxCount) return absl::InvalidArgumentError("gather: too many values");
  if (int rc = MPI_Gatherv(send, n[rank_], MPI_FLOAT, recv, n.data(), at.data(), MPI_FLOAT, root,
                           Comm(comm_));
      rc != MPI_SUCCESS) {
    return MpiError("MPI_Gatherv", rc);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MpiCommunicator::Gather(const std::string& bytes,
                                                                 int root) {
  if (size_ == 1) return std::vector<std::string>{bytes};
  if (bytes.size() > static_cast<size_t>(kMaxCount)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gather of ", bytes.size(), " bytes: too large"));
  }
  const int mine = static_cast<int>(bytes.size());
  std::vector<int> sizes(rank_ == root ? size_ : 0), offsets(sizes.size());
  if (int rc = MPI_Gather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, Comm(comm_));
      rc != MPI_SUCCESS) {
    return MpiError("MPI_Gather", rc);
  }
  std::string all;
  if (rank_ == root) {
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[r] = static_cast<int>(total);
      total += sizes[r];
    }
    if (total > kMaxCount) return absl::InvalidArgumentError("gather: too large in all");
    all.resize(static_cast<size_t>(total));
  }
  if (int rc = MPI_Gatherv(bytes.data(), mine, MPI_BYTE, all.data(), sizes.data(), offsets.data(),
                           MPI_BYTE, root, Comm(comm_));
      rc != MPI_SUCCESS) {
    return MpiError("MPI_Gatherv", rc);
  }
  std::vector<std::string> out;
  for (int r = 0; rank_ == root && r < size_; ++r) out.push_back(all.substr(offsets[r], sizes[r]));
  return out;
}

}  // namespace saturn
