// saturn-bench-gemm: the CPU backend's GEMM paths (the skinny weight-streaming kernel, the
// blocked kernel, OpenBLAS sgemm, and with bf16 weights where AMX runs the three AMX kernels, the
// last on weights stored as AMX tiles) at decode-like shapes, f32 or bf16 weights, against this
// machine's copy bandwidth and GEMM peak measured in the same run. Shows the M where OpenBLAS
// starts to win (the backend measures that itself at start-up: kernels/cpu/gemm/gemm_planner.h).
//   saturn-bench-gemm --n=2048 --k=768 --ms=1,2,4,8,16,32,64 --dtype=bf16 --json=gemm.json
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "engine/measure/calibration.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/stream_memory.h"
#include "kernels/cpu/thread_pool.h"

ABSL_FLAG(int, n, 2048, "output features (weight rows)");
ABSL_FLAG(int, k, 768, "input features");
ABSL_FLAG(std::string, ms, "1,2,4,8,16,24,32,48,64", "batch rows M to time");
ABSL_FLAG(int, threads, 0, "threads (0: all cores)");
ABSL_FLAG(int, repeats, 20, "timed repeats per point");
ABSL_FLAG(std::string, stat, "median",
          "median | min of the repeats (min: the least-disturbed run on a shared machine)");
ABSL_FLAG(std::string, dtype, "f32", "weight dtype: f32 | bf16");
ABSL_FLAG(std::string, json, "", "write results here");
ABSL_FLAG(int, prefetch_blocks, 1,
          "skinny kernel's software prefetch distance in weight-row blocks at M > 1 (0: none)");
ABSL_FLAG(bool, evict, false,
          "drop the weights from every cache level before each timed run, so they come from "
          "memory as a decode step's do (else they may sit in L2/L3 between runs)");
ABSL_FLAG(std::string, isa, "auto",
          "kernel level: auto (the best this CPU runs) | avx512 | avx2 | scalar");
ABSL_FLAG(int64_t, prefetch_bytes, saturn::cpu::kDefaultPrefetchBytes,
          "skinny kernel's software prefetch distance in bytes at M = 1 (0: none)");

namespace saturn {
namespace {

constexpr char kUsage[] =
    "saturn-bench-gemm: the CPU backend's GEMM paths against this machine's measured ceilings";

double TimeMs(cpu::ThreadPool& pool, const cpu::IsaKernels& kernels, const Tensor& x,
              const Tensor& w, const Tensor& out, cpu::GemmPath path, int repeats) {
  std::vector<double> t;
  for (int r = 0; r < repeats + 2; ++r) {
    if (absl::GetFlag(FLAGS_evict)) cpu::EvictFromCache(w.data, w.bytes());
    const auto t0 = std::chrono::steady_clock::now();
    (void)cpu::Gemm(pool, kernels, nullptr, x, w, out, path, absl::GetFlag(FLAGS_prefetch_blocks),
                    absl::GetFlag(FLAGS_prefetch_bytes));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return absl::GetFlag(FLAGS_stat) == "min" ? t.front() : t[t.size() / 2];
}

// Largest weight matrix (elements) and batch tile timed: 1 GiB of f32 weights.
constexpr int64_t kMaxElements = int64_t{1} << 28;

int Main() {
  const int n = absl::GetFlag(FLAGS_n), k = absl::GetFlag(FLAGS_k);
  if (!bench::FlagInRange("n", n, 1, 1 << 20) || !bench::FlagInRange("k", k, 1, 1 << 20) ||
      !bench::FlagInRange("repeats", absl::GetFlag(FLAGS_repeats), 1, 100000) ||
      !bench::FlagInRange("threads", absl::GetFlag(FLAGS_threads), 0,
                          cpu::ThreadPool::kMaxThreads) ||
      !bench::FlagInRange("prefetch_blocks", absl::GetFlag(FLAGS_prefetch_blocks), 0, 1 << 20) ||
      !bench::FlagInRange<int64_t>("prefetch_bytes", absl::GetFlag(FLAGS_prefetch_bytes), 0,
                                   int64_t{1} << 30)) {
    return 2;
  }
  if (int64_t{n} * k > kMaxElements) {
    std::fprintf(stderr, "--n, --k: %d x %d weights exceed the limit of %lld elements\n", n, k,
                 static_cast<long long>(kMaxElements));
    return 2;
  }
  if (const std::string stat = absl::GetFlag(FLAGS_stat); stat != "median" && stat != "min") {
    std::fprintf(stderr, "--stat: must be median or min, got \"%s\"\n", stat.c_str());
    return 2;
  }
  if (const std::string d = absl::GetFlag(FLAGS_dtype); d != "f32" && d != "bf16") {
    std::fprintf(stderr, "--dtype: must be f32 or bf16, got \"%s\"\n", d.c_str());
    return 2;
  }
  std::vector<int> ms;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_ms), ',')) {
    int m = 0;
    if (!absl::SimpleAtoi(s, &m) || m < 1 || int64_t{m} * std::max(n, k) > kMaxElements) {
      std::fprintf(stderr, "--ms: \"%s\" is not an integer in [1, %lld] for these --n, --k\n",
                   std::string(s).c_str(), static_cast<long long>(kMaxElements / std::max(n, k)));
      return 2;
    }
    ms.push_back(m);
  }
  auto backend = CreateBackend("cpu", absl::GetFlag(FLAGS_threads));
  if (!backend.ok()) {
    std::fprintf(stderr, "backend: %s\n", backend.status().ToString().c_str());
    return 1;
  }
  auto cal = Calibrate(backend->get());
  if (!cal.ok()) {
    std::fprintf(stderr, "calibration: %s\n", cal.status().ToString().c_str());
    return 1;
  }
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  cpu::ThreadPool pool(threads);
  cpu::Isa isa = cpu::BestIsa();
  if (const std::string name = absl::GetFlag(FLAGS_isa); name != "auto") {
    bool found = false;
    for (cpu::Isa i : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
      if (name == cpu::IsaName(i)) isa = i, found = true;
    }
    if (!found || !cpu::IsaSupported(isa)) {
      std::fprintf(
          stderr,
          "--isa: \"%s\" is not a kernel level this CPU runs (auto, avx512, avx2, scalar)\n",
          name.c_str());
      return 2;
    }
  }
  const cpu::IsaKernels& kernels = cpu::KernelsFor(isa);
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const bool bf16 = absl::GetFlag(FLAGS_dtype) == "bf16";
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  // The weights in the memory the backend gives its own (huge pages where granted).
  const size_t wn = size_t(n) * k;
  std::vector<float> xs(size_t(max_m) * k), os(size_t(max_m) * n);
  auto ws = cpu::StreamedArray<float>(wn);
  auto wb = cpu::StreamedArray<uint16_t>(wn);  // bf16 copy (truncated: random values anyway)
  if (ws == nullptr || wb == nullptr) {
    std::fprintf(stderr, "out of memory for %zu weights\n", wn);
    return 1;
  }
  for (float& v : xs) v = u(rng);
  for (size_t i = 0; i < wn; ++i) ws[i] = u(rng);
  for (size_t i = 0; i < wn; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &ws[i], 4);
    wb[i] = static_cast<uint16_t>(bits >> 16);
  }
  std::printf("calibrated: bandwidth %.1f GB/s, GEMM peak %.1f GFLOP/s (%d threads)\n",
              cal->bandwidth_bytes_per_s / 1e9, cal->gemm_flops_per_s / 1e9, threads);
  const char* bf16_dot = cpu::DetectCpuFeatures().avx512_bf16
                             ? cpu::Bf16DotFormName(cpu::Bf16DotFormInUse())
                             : "none (no AVX512-BF16)";
  std::printf("kernels %s | bf16 dot products: %s | OpenBLAS core %s\n",
              cpu::CpuFeatureSummary().c_str(), bf16_dot, openblas_get_corename());
  std::printf("kernel level %s; weights %s\n", cpu::IsaName(isa),
              absl::GetFlag(FLAGS_evict) ? "evicted from the caches before each run (from memory)"
                                         : "left in the caches between runs");
  const bool amx = cpu::AmxRuns(isa, bf16 ? DType::kBF16 : DType::kF32);
  // The weights as the CPU backend packs them (tensor.h): bf16 in AMX tiles where AMX runs,
  // f32 in 32-row panels (read by the blocked kernel's loops at any level).
  const Layout packed = bf16 ? (amx ? Layout::kAmxTiles : Layout::kRows) : Layout::kPanels;
  const char* packed_name = packed == Layout::kAmxTiles ? "amx_tiles" : "panels";
  const Tensor w_packed_shape{nullptr, bf16 ? DType::kBF16 : DType::kF32, n, k, packed};
  auto wp = cpu::StreamedArray<char>(packed != Layout::kRows ? w_packed_shape.bytes() : 1);
  if (wp == nullptr) {
    std::fprintf(stderr, "out of memory for the packed weights\n");
    return 1;
  }
  pool.ParallelFor(PanelPadded(n) / kPanelRows, 1, [&](int64_t b, int64_t e) {
    if (packed == Layout::kAmxTiles) {
      cpu::PackAmxTiles(ws.get(), n, k, b, e, reinterpret_cast<uint16_t*>(wp.get()));
    } else if (packed == Layout::kPanels) {
      cpu::PackPanels(ws.get(), n, k, b, e, reinterpret_cast<float*>(wp.get()));
    }
  });
  std::printf("%5s %12s %12s %12s %12s %14s %13s %10s %14s\n", "M", "skinny ms", "blocked ms",
              "openblas ms", amx ? "amx ms" : "(no amx)", amx ? "amx_stream ms" : "",
              packed != Layout::kRows ? absl::StrCat(packed_name, " ms").c_str() : "", "winner",
              "roofline % (best)");
  nlohmann::json out;
  out["calibration"] = nlohmann::json::parse(CalibrationToJson(*cal));
  out["n"] = n;
  out["k"] = k;
  out["dtype"] = absl::GetFlag(FLAGS_dtype);
  out["isa"] = cpu::CpuFeatureSummary();
  out["kernel_level"] = cpu::IsaName(isa);
  out["evict"] = absl::GetFlag(FLAGS_evict);
  out["openblas_core"] = openblas_get_corename();
  out["bf16_dot_form"] = bf16_dot;
  for (int m : ms) {
    const Tensor x{xs.data(), DType::kF32, m, k}, o{os.data(), DType::kF32, m, n};
    const Tensor w =
        bf16 ? Tensor{wb.get(), DType::kBF16, n, k} : Tensor{ws.get(), DType::kF32, n, k};
    const int reps = absl::GetFlag(FLAGS_repeats);
    const double skinny = TimeMs(pool, kernels, x, w, o, cpu::GemmPath::kSkinny, reps);
    const double blocked = TimeMs(pool, kernels, x, w, o, cpu::GemmPath::kBlocked, reps);
    const double blas = TimeMs(pool, kernels, x, w, o, cpu::GemmPath::kBlas, reps);
    const double bytes = 4.0 * (double(m) * k + double(m) * n) + double(w.bytes());
    const double flops = 2.0 * m * n * double(k);
    const double floor_ms =
        1e3 * std::max(bytes / cal->bandwidth_bytes_per_s, flops / cal->gemm_flops_per_s);
    // AMX only for bf16 weights on a CPU that grants it (infinite elsewhere: never the winner).
    const double stream = amx ? TimeMs(pool, kernels, x, w, o, cpu::GemmPath::kAmxStream, reps)
                              : std::numeric_limits<double>::infinity();
    const double packs = amx ? TimeMs(pool, kernels, x, w, o, cpu::GemmPath::kAmx, reps)
                             : std::numeric_limits<double>::infinity();
    Tensor w_packed = w_packed_shape;
    w_packed.data = wp.get();
    const double tiles = packed != Layout::kRows
                             ? TimeMs(pool, kernels, x, w_packed, o, cpu::GemmPath::kAuto, reps)
                             : std::numeric_limits<double>::infinity();
    const double best = std::min({skinny, blocked, blas, packs, stream, tiles});
    const char* winner = best == skinny    ? "skinny"
                         : best == blocked ? "blocked"
                         : best == blas    ? "openblas"
                         : best == packs   ? "amx"
                         : best == stream  ? "amx_stream"
                                           : packed_name;
    std::printf("%5d %12.3f %12.3f %12.3f %12.3f %14.3f %13.3f %10s %14.1f\n", m, skinny, blocked,
                blas, amx ? packs : 0.0, amx ? stream : 0.0, packed != Layout::kRows ? tiles : 0.0,
                winner, 100 * floor_ms / best);
    out["rows"].push_back(
        {{"m", m},
         {"skinny_ms", skinny},
         {"blocked_ms", blocked},
         {"openblas_ms", blas},
         {"amx_ms", amx ? nlohmann::json(packs) : nlohmann::json(nullptr)},
         {"amx_stream_ms", amx ? nlohmann::json(stream) : nlohmann::json(nullptr)},
         {"amx_tiles_ms",
          packed == Layout::kAmxTiles ? nlohmann::json(tiles) : nlohmann::json(nullptr)},
         {"panels_ms", packed == Layout::kPanels ? nlohmann::json(tiles) : nlohmann::json(nullptr)},
         {"gflops_best", flops / best * 1e-6},
         {"roofline_floor_ms", floor_ms}});
  }
  return bench::WriteJson(out, absl::GetFlag(FLAGS_json));
}

}  // namespace
}  // namespace saturn

int main(int argc, char** argv) {
  return saturn::bench::RunTool(argc, argv, saturn::kUsage, saturn::Main);
}
