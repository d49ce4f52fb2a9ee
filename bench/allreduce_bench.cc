// saturn-bench-allreduce: Saturn's all-reduce (MpiCommunicator::AllReduceSum, what the backend's
// AllReduce op calls) against the MPI library's own loop (MPI_Allreduce in place, as the OSU
// micro-benchmarks time it) at the message sizes a tensor-parallel step sends: rows x hidden
// size x 4 bytes, for decode batches and prefill chunks of --model. Interleaved rounds, the
// median per round and the ratio Saturn / library, also as JSON. Run under the launcher:
//   mpirun -np 2 build/bench/saturn-bench-allreduce --model small --json out.json
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "engine/model/model_config.h"
#include "kernels/base/clock.h"
#include "kernels/comm/mpi_communicator.h"

ABSL_FLAG(std::string, model, "small", "Preset whose hidden size sets the messages");
ABSL_FLAG(std::string, rows, "1,8,64,512", "Rows per message (decode batches, prefill chunks)");
ABSL_FLAG(int, iters, 200, "All-reduces per timing (a median over them)");
ABSL_FLAG(int, rounds, 5, "Interleaved rounds (Saturn, library, Saturn, ...)");
ABSL_FLAG(std::string, json, "", "Write the figures here too");

namespace {

// Median microseconds of `iters` calls of `fn`, each after a barrier so the ranks start
// together (the library loop's convention in osu_allreduce).
template <typename Fn>
double MedianUs(int iters, Fn&& fn) {
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = saturn::NowUs();
    fn();
    us.push_back(saturn::NowUs() - t0);
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

int Run(int argc, char** argv) {
  auto world = saturn::MpiCommunicator::Init(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "saturn-bench-allreduce: %s\n",
                 std::string(world.status().message()).c_str());
    return 2;
  }
  saturn::MpiCommunicator& comm = **world;
  const auto model = saturn::PresetConfig(absl::GetFlag(FLAGS_model));
  if (!model.ok()) {
    std::fprintf(stderr, "saturn-bench-allreduce: %s\n",
                 std::string(model.status().message()).c_str());
    return 2;
  }
  std::vector<int> rows;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',', absl::SkipEmpty())) {
    int r = 0;
    if (!absl::SimpleAtoi(part, &r) || r < 1 || r > 65536) {
      std::fprintf(stderr,
                   "saturn-bench-allreduce: --rows: \"%s\" is not a row count in [1, 65536]\n",
                   std::string(part).c_str());
      return 2;
    }
    rows.push_back(r);
  }
  const int iters = std::max(1, absl::GetFlag(FLAGS_iters)),
            rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  nlohmann::json out{{"tool", "saturn-bench-allreduce"},
                     {"transport", comm.transport()},
                     {"model", model->name},
                     {"hidden_size", model->hidden_size},
                     {"sizes", nlohmann::json::array()}};
  if (comm.rank() == 0) {
    std::printf("%s, %s (hidden %d), median of %d calls a round, %d rounds\n",
                comm.transport().c_str(), model->name.c_str(), model->hidden_size, iters, rounds);
    std::printf("%6s %10s %12s %12s %8s\n", "rows", "bytes", "saturn us", "library us", "ratio");
  }
  for (int r : rows) {
    const int64_t count = int64_t{r} * model->hidden_size;
    std::vector<float> a(count, 1.0f), b(count, 1.0f);
    nlohmann::json per_round = nlohmann::json::array();
    std::vector<double> ratios;
    for (int k = 0; k < rounds; ++k) {
      const double ours = MedianUs(iters, [&] { (void)comm.AllReduceSum(a.data(), count); });
      const double lib = MedianUs(iters, [&] {
        MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      });
      ratios.push_back(lib > 0 ? ours / lib : 0);
      per_round.push_back({{"saturn_us", ours}, {"library_us", lib}, {"ratio", ratios.back()}});
      if (comm.rank() == 0) {
        std::printf("%6d %10lld %12.1f %12.1f %8.2f\n", r, static_cast<long long>(count * 4), ours,
                    lib, ratios.back());
      }
    }
    std::sort(ratios.begin(), ratios.end());
    out["sizes"].push_back({{"rows", r},
                            {"bytes", count * 4},
                            {"median_ratio", ratios[ratios.size() / 2]},
                            {"rounds", per_round}});
  }
  if (comm.rank() == 0 && !absl::GetFlag(FLAGS_json).empty()) {
    return saturn::bench::WriteJson(out, absl::GetFlag(FLAGS_json));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  saturn::ParseFlagsOnly(argc, argv, "saturn-bench-allreduce: all-reduce against MPI's own loop");
  return Run(argc, argv);
}
