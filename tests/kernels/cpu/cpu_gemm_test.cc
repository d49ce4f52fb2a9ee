// CPU GEMM (kernels/cpu/gemm/gemm.cc, gemm_planner.cc) against float64 references: each path
// (skinny, blocked, BLAS, the planner's automatic choice, and the backend's own op) in its
// own test, with f32 and bf16 weights, at every kernel level the CPU runs (scalar, AVX2,
// AVX-512, and AVX512-BF16 dot products where present). With bf16 weights every path
// multiplies bf16-rounded x, so the reference is float64 over the same bf16 values of x and
// w and every path must match it at f32 tolerance (and so each other: results do not depend
// on the path the planner picks). Also: the backend's Gemm over pool sizes, the skinny
// kernel's prefetch distances, --dtype plumbing of CreateCpuBackend, the cost model's byte
// count for bf16 weights, and the errors that name the op.
#include <algorithm>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm/gemm_planner.h"
#include "kernels/cpu/ops.h"
#include "kernels/half_float.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

float Bf16Value(float f) { return Bf16ToF32(F32ToBf16(f)); }  // what a bf16 tensor holds

struct Shape {
  int m, n, k;
};
const Shape kShapes[] = {{1, 7, 5},
                         {1, 320, 768},
                         {2, 64, 100},
                         {3, 17, 33},
                         {8, 131, 77},
                         {17, 33, 40},
                         {64, 130, 96},
                         {130, 40, 64},
                         // many weight-row blocks (the skinny kernel prefetches the next one)
                         // with odd k and a row tail, at one and several input rows
                         {1, 203, 129},
                         {5, 203, 129},
                         // the blocked kernels' edges: k past one k block (256) and odd, rows
                         // past one micro tile (12) and a partial out-column panel (32)
                         {13, 70, 517},
                         {25, 33, 256}};

// One GEMM path; `through_backend` runs Backend::Gemm (its own planner) instead of
// cpu::Gemm with `path` forced.
struct PathCase {
  const char* name;
  cpu::GemmPath path;
  bool through_backend;
};

// Readable CTest names: "Paths/CpuGemmPathTest.EveryIsaF32AndBf16/Skinny".
void PrintTo(const PathCase& c, std::ostream* os) { *os << c.name; }

class CpuGemmPathTest : public ::testing::TestWithParam<PathCase> {
 protected:
  // One planner per (kernel level, weight dtype) for the whole suite, as one backend keeps
  // one: what it measures (paths per M, prefetch distances) is measured once, whichever
  // path's case asks first, and every path then runs with the same measurements.
  static cpu::GemmPlanner& PlannerFor(cpu::Isa isa, bool bf16) {
    static std::map<std::pair<cpu::Isa, bool>, std::unique_ptr<cpu::GemmPlanner>> planners;
    std::unique_ptr<cpu::GemmPlanner>& p = planners[{isa, bf16}];
    if (p == nullptr) p = std::make_unique<cpu::GemmPlanner>();
    return *p;
  }
};

TEST_P(CpuGemmPathTest, EveryIsaF32AndBf16) {
  const PathCase& pc = GetParam();
  std::mt19937 rng(5);
  for (cpu::Isa isa : SupportedIsas()) {
    for (const char* dtype : {"f32", "bf16"}) {
      SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " " + dtype);
      std::unique_ptr<Backend> b = MakeCpuIsa(2, isa, dtype);
      const bool bf16 = std::string(dtype) == "bf16";
      const DType wdt = bf16 ? DType::kBF16 : DType::kF32;
      cpu::ThreadPool pool(2);
      cpu::GemmPlanner& planner = PlannerFor(isa, bf16);
      for (const Shape& s : kShapes) {
        std::vector<float> x = Random(rng, s.m * s.k), w = Random(rng, s.n * s.k);
        DevTensor dx = F32(*b, s.m, s.k, x), dw = Empty(*b, wdt, s.n, s.k);
        ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
        if (bf16) {  // what the device holds, and what every path multiplies x as
          for (float& v : w) v = Bf16Value(v);
          for (float& v : x) v = Bf16Value(v);
        }
        const std::vector<double> ref = GemmReference(x, w, s.m, s.n, s.k);
        DevTensor out = Poisoned(*b, s.m, s.n);
        if (pc.through_backend) {
          ASSERT_TRUE(b->Gemm(dx.t, dw.t, out.t).ok());
        } else {
          const absl::Status st =
              cpu::Gemm(pool, cpu::KernelsFor(isa), &planner, dx.t, dw.t, out.t, pc.path);
          if (cpu::IsAmx(pc.path) && !cpu::AmxRuns(isa, wdt)) {
            // Refused, naming what it lacks, where it cannot run (f32 weights, a lower
            // kernel level, no AMX the process may use).
            EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
            EXPECT_TRUE(absl::StrContains(st.message(), "AMX")) << st;
            continue;
          }
          ASSERT_TRUE(st.ok()) << st;
        }
        EXPECT_LT(RelErr(ToHost<float>(*b, out.t), ref), kTol)
            << s.m << "x" << s.n << "x" << s.k << " path " << pc.name;
      }
      // Every path but AMX (which prefetches by itself) asks the planner for the skinny
      // kernel's prefetch distance.
      if (!pc.through_backend && !cpu::IsAmx(pc.path)) {
        EXPECT_TRUE(absl::StrContains(planner.Describe(), std::string("/") + dtype))
            << planner.Describe();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuGemmPathTest,
                         ::testing::Values(PathCase{"Skinny", cpu::GemmPath::kSkinny, false},
                                           PathCase{"Blocked", cpu::GemmPath::kBlocked, false},
                                           PathCase{"Blas", cpu::GemmPath::kBlas, false},
                                           PathCase{"Amx", cpu::GemmPath::kAmx, false},
                                           PathCase{"AmxStream", cpu::GemmPath::kAmxStream, false},
                                           PathCase{"Auto", cpu::GemmPath::kAuto, false},
                                           PathCase{"BackendOp", cpu::GemmPath::kAuto, true}),
                         [](const ::testing::TestParamInfo<PathCase>& info) {
                           return std::string(info.param.name);
                         });

// Both AMX kernels (bf16 weights, where the CPU has AMX and the OS grants it) against the
// float64 reference at the shapes their tilings have edges at: one and two 16-row tiles of x
// and their tails, a 32-row weight panel's second half empty, partial or whole, k tails
// inside a 32-wide tile (the stream kernel then copies its panels), and x in more than one
// ~1 MiB block of rows (k 2048: 256 rows a block). With three threads the panels land on
// threads unevenly.
TEST(CpuGemmTest, AmxTilesMatchTheReferenceAtEveryEdge) {
  if (!cpu::AmxRuns(cpu::BestIsa(), DType::kBF16)) {
    GTEST_SKIP() << "no AMX this process may use: " << cpu::CpuFeatureSummary();
  }
  std::unique_ptr<Backend> b = MakeCpuIsa(3, cpu::BestIsa(), "bf16");
  cpu::ThreadPool pool(3);
  std::mt19937 rng(13);
  // The last two shapes' long k: each thread's columns span several blocks of packed weight
  // panels (gemm_amx.cc packs half the L2, at most 2 MiB, at a time: with 2 MiB of L2 a block
  // holds one panel at k = 8200 and three at k = 4100).
  const Shape shapes[] = {{1, 1, 1},      {1, 16, 32},   {16, 16, 32},    {15, 17, 31},
                          {17, 33, 65},   {32, 32, 64},  {33, 48, 96},    {48, 80, 100},
                          {64, 31, 768},  {100, 96, 33}, {300, 70, 2048}, {40, 700, 8200},
                          {40, 700, 4100}};
  for (const Shape& s : shapes) {
    std::vector<float> x = Random(rng, s.m * s.k), w = Random(rng, s.n * s.k);
    DevTensor dx = F32(*b, s.m, s.k, x), dw = Empty(*b, DType::kBF16, s.n, s.k);
    ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
    for (float& v : w) v = Bf16Value(v);
    for (float& v : x) v = Bf16Value(v);
    const std::vector<double> ref = GemmReference(x, w, s.m, s.n, s.k);
    for (cpu::GemmPath path : {cpu::GemmPath::kAmx, cpu::GemmPath::kAmxStream}) {
      DevTensor out = Poisoned(*b, s.m, s.n);
      ASSERT_TRUE(
          cpu::Gemm(pool, cpu::KernelsFor(cpu::BestIsa()), nullptr, dx.t, dw.t, out.t, path).ok());
      EXPECT_LT(RelErr(ToHost<float>(*b, out.t), ref), kTol)
          << s.m << "x" << s.n << "x" << s.k << " " << cpu::GemmPathName(path);
    }
  }
}

// Backend::Gemm over pool sizes of 1 and 3 threads: one row and many, odd shapes, n = 1.
class CpuGemmOpTest : public CpuOpTest {};

TEST_P(CpuGemmOpTest, Gemm) {
  for (auto [m, n, k] : {std::tuple{1, 7, 5}, std::tuple{1, 320, 768}, std::tuple{3, 17, 33},
                         std::tuple{64, 130, 96}, std::tuple{5, 1, 9}, std::tuple{8, 131, 77},
                         std::tuple{16, 64, 768}, std::tuple{17, 33, 40}, std::tuple{80, 20, 24}}) {
    std::vector<float> x = Random(rng_, m * k), w = Random(rng_, n * k);
    DevTensor dx = F32(*b_, m, k, x), dw = F32(*b_, n, k, w), out = Poisoned(*b_, m, n);
    ASSERT_TRUE(b_->Gemm(dx.t, dw.t, out.t).ok());
    EXPECT_LT(RelErr(ToHost<float>(*b_, out.t), GemmReference(x, w, m, n, k)), kTol)
        << m << "x" << n << "x" << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuGemmOpTest, ::testing::Values(1, 3), ThreadsName);

// The skinny kernel's software prefetch only moves bytes earlier: every distance the planner
// may pick (blocks for M > 1, bytes for the M = 1 row stream) gives the same bits, at block
// edges (rows a multiple of the weight-row block, one more, one less) and odd k, for one and
// several input rows, with 4 x 4 tiles (AVX-512, from four input rows) beside the 8 x 2 and
// 8 x 1 ones, and at M = 1 with k past and between the row stream's unrolled steps (64 and 128
// elements) and its 16- or 32-element steps.
TEST(CpuGemmTest, SkinnyPrefetchDistanceNeverChangesResults) {
  std::mt19937 rng(11);
  const Shape shapes[] = {{1, 64, 768}, {1, 65, 33},  {2, 63, 129}, {3, 136, 64},
                          {1, 8, 31},   {4, 24, 40},  {7, 65, 129}, {9, 17, 768},
                          {1, 37, 200}, {1, 19, 100}, {1, 5, 2048}};
  for (cpu::Isa isa : SupportedIsas()) {
    for (const char* dtype : {"f32", "bf16"}) {
      SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " " + dtype);
      std::unique_ptr<Backend> b = MakeCpuIsa(2, isa, dtype);
      const bool bf16 = std::string(dtype) == "bf16";
      cpu::ThreadPool pool(2);
      for (const Shape& s : shapes) {
        std::vector<float> x = Random(rng, s.m * s.k), w = Random(rng, s.n * s.k);
        DevTensor dx = F32(*b, s.m, s.k, x),
                  dw = Empty(*b, bf16 ? DType::kBF16 : DType::kF32, s.n, s.k);
        ASSERT_TRUE(b->UploadF32(w.data(), dw.t).ok());
        for (float& v : w) v = bf16 ? Bf16Value(v) : v;
        for (float& v : x) v = bf16 ? Bf16Value(v) : v;
        const std::vector<double> ref = GemmReference(x, w, s.m, s.n, s.k);
        std::vector<float> first;
        for (int pf : cpu::GemmPlanner::kPrefetchCandidates) {
          for (int64_t bytes : cpu::GemmPlanner::kPrefetchByteCandidates) {
            DevTensor out = Poisoned(*b, s.m, s.n);
            ASSERT_TRUE(cpu::Gemm(pool, cpu::KernelsFor(isa), nullptr, dx.t, dw.t, out.t,
                                  cpu::GemmPath::kSkinny, pf, bytes)
                            .ok());
            const std::vector<float> got = ToHost<float>(*b, out.t);
            const std::string at =
                absl::StrCat(s.m, "x", s.n, "x", s.k, " pf ", pf, " bytes ", bytes);
            EXPECT_LT(RelErr(got, ref), kTol) << at;
            if (first.empty()) first = got;
            EXPECT_EQ(got, first) << at;
          }
        }
      }
    }
  }
}

// Past its largest probe M the planner picks a many-row path (blocked or BLAS), below it it
// always decides; and it measures the skinny kernel's prefetch distance per weight shape.
TEST(CpuGemmTest, PlannerNeverStreamsPastItsLargestProbe) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  std::mt19937 rng(9);
  DevTensor w = F32(*b, 16, 8, Random(rng, 16 * 8));
  cpu::ThreadPool pool(2);
  cpu::GemmPlanner planner;
  const cpu::IsaKernels& k = cpu::KernelsFor(cpu::BestIsa());
  const cpu::GemmPath big = planner.Choose(pool, k, w.t, 4 * cpu::GemmPlanner::kMaxProbeM);
  EXPECT_TRUE(big == cpu::GemmPath::kBlocked || big == cpu::GemmPath::kBlas)
      << cpu::GemmPathName(big);
  for (int64_t m : {1, 3, 100, 256}) {
    EXPECT_NE(planner.Choose(pool, k, w.t, m), cpu::GemmPath::kAuto) << m;
  }
  EXPECT_TRUE(absl::StrContains(planner.Describe(), "k8/f32")) << planner.Describe();
  // bf16 weights where AMX runs: past the last probe the AMX tiles or another many-row path,
  // never the stream kernel (it re-reads x per weight panel) or the skinny one.
  DevTensor wb = Empty(*b, DType::kBF16, 64, 96);
  ASSERT_TRUE(b->UploadF32(Random(rng, 64 * 96).data(), wb.t).ok());
  const cpu::GemmPath big_bf16 = planner.Choose(pool, k, wb.t, 4 * cpu::GemmPlanner::kMaxProbeM);
  EXPECT_TRUE(big_bf16 == cpu::GemmPath::kBlocked || big_bf16 == cpu::GemmPath::kBlas ||
              big_bf16 == cpu::GemmPath::kAmx)
      << cpu::GemmPathName(big_bf16);
  // The prefetch distances: rows too short to measure keep one block and no row-stream
  // prefetch; longer ones get one of the candidates, as measured.
  EXPECT_EQ(planner.PrefetchBlocks(pool, k, w.t), 1);
  EXPECT_EQ(planner.PrefetchBytes(pool, k, w.t), 0);
  DevTensor w64 = F32(*b, 40, 64, Random(rng, 40 * 64));
  const int pf = planner.PrefetchBlocks(pool, k, w64.t);
  const int64_t bytes = planner.PrefetchBytes(pool, k, w64.t);
  const auto& c = cpu::GemmPlanner::kPrefetchCandidates;
  EXPECT_NE(std::find(std::begin(c), std::end(c), pf), std::end(c)) << pf;
  const auto& cb = cpu::GemmPlanner::kPrefetchByteCandidates;
  EXPECT_NE(std::find(std::begin(cb), std::end(cb), bytes), std::end(cb)) << bytes;
  EXPECT_TRUE(absl::StrContains(planner.Describe(),
                                absl::StrCat("k64/f32: prefetch=", pf, " prefetch_bytes=", bytes)))
      << planner.Describe();
}

// Served batch-1 skinny streams of the tuned dtype start the prefetch tuner; with no tuned
// dtype (the CPU backend's bf16 weights in AMX tiles, which never take the skinny path) the
// same streams, such as calibration's row-major ones, never do: a tuner that no served step
// would settle would keep the engine's warm-up decoding and the plan saying "tuning".
TEST(CpuGemmTest, NoTunedDtypeNeverStartsTheTuner) {
  std::unique_ptr<Backend> b = MakeCpuIsa(2, cpu::BestIsa(), "bf16", /*batch_invariant=*/false,
                                          /*packed_weights=*/false);
  std::mt19937 rng(12);
  const int k = 1024, n = 8192;  // 16 MiB of bf16 each, 48 MiB a pass: past the caches' hold
  std::vector<DevTensor> ws, outs;
  for (int i = 0; i < 3; ++i) {
    ws.push_back(Empty(*b, DType::kBF16, n, k));
    ASSERT_TRUE(b->UploadF32(Random(rng, size_t{n} * k).data(), ws.back().t).ok());
    outs.push_back(Poisoned(*b, 1, n));
  }
  DevTensor x = F32(*b, 1, k, Random(rng, k));
  cpu::ThreadPool pool(2);
  const cpu::IsaKernels& kernels = cpu::KernelsFor(cpu::BestIsa());
  for (bool tuned : {true, false}) {
    cpu::GemmPlanner planner;
    planner.set_tuned_dtype(tuned ? std::optional<DType>(DType::kBF16) : std::nullopt);
    bool started = false;
    for (int pass = 0; pass < 4 && !started; ++pass) {
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(
            cpu::Gemm(pool, kernels, &planner, x.t, ws[i].t, outs[i].t, cpu::GemmPath::kSkinny)
                .ok());
      }
      started = planner.Tuning();
    }
    EXPECT_EQ(started, tuned) << planner.Describe();
  }
  // The backend that keeps its bf16 weights in AMX tiles tunes nothing on row-major ones.
  if (!cpu::AmxRuns(cpu::BestIsa(), DType::kBF16)) return;
  std::unique_ptr<Backend> t = MakeCpuIsa(2, cpu::BestIsa(), "bf16", /*batch_invariant=*/false);
  ASSERT_EQ(t->GemmWeightLayout(DType::kBF16), Layout::kAmxTiles);
  for (int pass = 0; pass < 4; ++pass) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->Gemm(x.t, ws[i].t, outs[i].t).ok());
    EXPECT_FALSE(t->TuningOnServedSteps()) << "pass " << pass << ": " << t->KernelPlan();
  }
}

TEST(CpuGemmTest, DtypeOptionAndCostModelBytes) {
  CpuBackendOptions o;
  o.num_threads = 1;
  o.weight_dtype = "f16";
  absl::StatusOr<std::unique_ptr<Backend>> bad = CreateCpuBackend(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "dtype")) << bad.status();

  o.weight_dtype = "auto";
  absl::StatusOr<std::unique_ptr<Backend>> autob = CreateCpuBackend(o);
  ASSERT_TRUE(autob.ok());
  EXPECT_EQ((*autob)->weight_dtype(), cpu::HasNativeBf16() ? DType::kBF16 : DType::kF32);
  EXPECT_EQ((*autob)->compute_dtype(), DType::kF32);

  std::unique_ptr<Backend> b = MakeCpuIsa(1, cpu::BestIsa(), "bf16");
  EXPECT_EQ(b->weight_dtype(), DType::kBF16);
  const int m = 4, n = 24, k = 32;
  std::mt19937 rng(3);
  std::vector<float> wf = Random(rng, n * k);
  DevTensor x = F32(*b, m, k, Random(rng, m * k)), w = Empty(*b, DType::kBF16, n, k);
  ASSERT_TRUE(b->UploadF32(wf.data(), w.t).ok());
  DevTensor out = Poisoned(*b, m, n);
  b->BeginStep(true);
  ASSERT_TRUE(b->Gemm(x.t, w.t, out.t).ok());
  absl::StatusOr<StepTiming> timing = b->EndStep();
  ASSERT_TRUE(timing.ok());
  ASSERT_EQ(timing->ops.size(), 1u);
  // Weights count 2 bytes per parameter; x and out 4 per element.
  EXPECT_EQ(timing->ops[0].cost.bytes, 4.0 * m * k + 2.0 * n * k + 4.0 * m * n);
  EXPECT_EQ(timing->ops[0].cost.flops, 2.0 * m * n * k);
}

TEST(CpuGemmTest, UnsupportedIsaIsRejected) {
  if (cpu::IsaSupported(cpu::Isa::kAvx512)) GTEST_SKIP() << "this CPU runs every level";
  CpuBackendOptions o;
  o.isa = cpu::Isa::kAvx512;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
}

// Backend::Gemm's status for x [2, k_x] and w [3, k_w], both of `dtype`, into f32 [2, 3].
absl::Status GemmStatus(DType dtype, int64_t k_x, int64_t k_w) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  DevTensor x = Empty(*b, dtype, 2, k_x), w = Empty(*b, dtype, 3, k_w);
  DevTensor out = Empty(*b, DType::kF32, 2, 3);
  return b->Gemm(x.t, w.t, out.t);
}

// By design the CPU backend's activations and outputs are f32 (bf16 is a weight format only):
// bf16 activations are refused by name, not computed wrongly.
TEST(CpuGemmErrors, Bf16ActivationsAreRejectedAsUnimplemented) {
  const absl::Status s = GemmStatus(DType::kBF16, 4, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(s.message(), "bf16")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "gemm")) << s;
}

TEST(CpuGemmErrors, ShapeErrorNamesTheOp) {
  const absl::Status s = GemmStatus(DType::kF32, 4, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "gemm")) << s;
}

}  // namespace
}  // namespace saturn::testing
