// saturn-bench-gemm: the CPU backend's two GEMM paths (the skinny weight-streaming kernel and
// OpenBLAS sgemm) at decode-like shapes, against this machine's copy bandwidth and GEMM peak
// measured in the same run. Picks the M where OpenBLAS starts to win (kernels/cpu/gemm.cc's
// kSkinnyMaxM should sit there).
//   saturn-bench-gemm --n=2048 --k=768 --ms=1,2,4,8,16,32,64 --json=gemm.json
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/diag/calibration.h"
#include "engine/flags_help.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

ABSL_FLAG(int, n, 2048, "output features (weight rows)");
ABSL_FLAG(int, k, 768, "input features");
ABSL_FLAG(std::string, ms, "1,2,4,8,16,24,32,48,64", "batch rows M to time");
ABSL_FLAG(int, threads, 0, "threads (0: all cores)");
ABSL_FLAG(int, repeats, 20, "timed repeats per point (median reported)");
ABSL_FLAG(std::string, json, "", "write results here");

namespace saturn {
namespace {

double TimeMs(cpu::ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor& out,
              cpu::GemmPath path, int repeats) {
  std::vector<double> t;
  for (int r = 0; r < repeats + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)cpu::Gemm(pool, x, w, out, path);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int Main() {
  auto backend = CreateBackend("cpu", absl::GetFlag(FLAGS_threads));
  if (!backend.ok()) return 1;
  auto cal = Calibrate(backend->get());
  if (!cal.ok()) {
    std::fprintf(stderr, "calibration: %s\n", cal.status().ToString().c_str());
    return 1;
  }
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  cpu::ThreadPool pool(threads);
  const int n = absl::GetFlag(FLAGS_n), k = absl::GetFlag(FLAGS_k);
  std::vector<int> ms;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_ms), ',')) {
    int m = 0;
    if (!absl::SimpleAtoi(s, &m) || m < 1) {
      std::fprintf(stderr, "--ms: \"%s\" is not a positive integer\n", std::string(s).c_str());
      return 2;
    }
    ms.push_back(m);
  }
  const int max_m = *std::max_element(ms.begin(), ms.end());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xs(size_t(max_m) * k), ws(size_t(n) * k), os(size_t(max_m) * n);
  for (float& v : xs) v = u(rng);
  for (float& v : ws) v = u(rng);
  std::printf("calibrated: bandwidth %.1f GB/s, GEMM peak %.1f GFLOP/s (%d threads)\n",
              cal->bandwidth_bytes_per_s / 1e9, cal->gemm_flops_per_s / 1e9, threads);
  std::printf("%5s %12s %12s %10s %14s\n", "M", "skinny ms", "openblas ms", "winner",
              "roofline % (best)");
  nlohmann::json out;
  out["calibration"] = nlohmann::json::parse(CalibrationToJson(*cal));
  out["n"] = n;
  out["k"] = k;
  for (int m : ms) {
    const Tensor x{xs.data(), DType::kF32, m, k}, w{ws.data(), DType::kF32, n, k},
        o{os.data(), DType::kF32, m, n};
    const int reps = absl::GetFlag(FLAGS_repeats);
    const double skinny = TimeMs(pool, x, w, o, cpu::GemmPath::kSkinny, reps);
    const double blas = TimeMs(pool, x, w, o, cpu::GemmPath::kBlas, reps);
    const double bytes = 4.0 * (double(m) * k + double(n) * k + double(m) * n);
    const double flops = 2.0 * m * n * double(k);
    const double floor_ms =
        1e3 * std::max(bytes / cal->bandwidth_bytes_per_s, flops / cal->gemm_flops_per_s);
    const double best = std::min(skinny, blas);
    std::printf("%5d %12.3f %12.3f %10s %14.1f\n", m, skinny, blas,
                skinny <= blas ? "skinny" : "openblas", 100 * floor_ms / best);
    out["rows"].push_back(
        {{"m", m}, {"skinny_ms", skinny}, {"openblas_ms", blas}, {"roofline_floor_ms", floor_ms}});
  }
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) std::ofstream(path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace saturn

int main(int argc, char** argv) {
  saturn::ParseCommandLineWithHelp(
      argc, argv,
      "saturn-bench-gemm: the CPU backend's GEMM paths against this machine's measured ceilings");
  return saturn::Main();
}
