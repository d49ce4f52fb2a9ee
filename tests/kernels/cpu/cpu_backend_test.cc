// The CPU backend itself (kernels/cpu/cpu_backend.cc): its identity and properties,
// its poll-time setting's checks, 64-byte aligned allocations, Zero, UploadF32's bf16/f16 rounding,
// and the per-op records a step returns. Each op's arithmetic has its own test file
// (cpu_<op>_test.cc).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "kernels/cpu/gemm/stream_tuner.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace saturn::testing {
namespace {

TEST(CpuBackendTest, Properties) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  EXPECT_EQ(b->name(), "cpu");
  EXPECT_TRUE(absl::StrContains(b->device_name(), "(2 threads)")) << b->device_name();
  EXPECT_EQ(b->compute_dtype(), DType::kF32);
  EXPECT_GT(b->device_memory_bytes(), size_t{1} << 28);
  EXPECT_TRUE(b->per_op_timing_is_cheap());
  EXPECT_FALSE(b->SupportsGraphs());
  EXPECT_EQ(b->BeginGraphCapture().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(b->Synchronize().ok());
  EXPECT_FALSE(CreateCpuBackend(-1).ok());
  EXPECT_TRUE(absl::StrContains(MakeCpu(0)->device_name(), "threads"));
}

// The KV cache's dtype follows the weights' unless kv_cache_dtype names one; an unknown name
// is refused naming the option.
TEST(CpuBackendTest, KvCacheDtypeFollowsTheWeightsUnlessNamed) {
  for (const char* weights : {"f32", "bf16"}) {
    for (const char* kv : {"auto", "f32", "bf16"}) {
      CpuBackendOptions o;
      o.num_threads = 1;
      o.weight_dtype = weights;
      o.kv_cache_dtype = kv;
      absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(o);
      ASSERT_TRUE(b.ok()) << b.status();
      const std::string want = std::string(kv) == "auto" ? weights : kv;
      EXPECT_EQ(DTypeName((*b)->kv_cache_dtype()), want) << weights << " weights, kv " << kv;
      EXPECT_EQ(DTypeName((*b)->weight_dtype()), std::string(weights));
    }
  }
  CpuBackendOptions bad;
  bad.kv_cache_dtype = "fp8";
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(bad);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(b.status().message(), "kv_cache_dtype")) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "fp8")) << b.status();
  EXPECT_EQ(CreateBackend("cpu", 1, "f32", "f16").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The backend reports the GEMM kernels its planner chose, per weight (K, dtype) and input-row
// count, once a GEMM has run; nothing before.
// The kernel plan: one path for every M when batch-invariant (the default; bf16 weights where
// AMX runs: the faster AMX kernel per probed M, both summing alike), else the measured path
// per probed M.
TEST(CpuBackendTest, KernelPlanNamesTheChosenPaths) {
  const bool amx = cpu::AmxRuns(cpu::BestIsa(), DType::kBF16);
  for (bool invariant : {true, false}) {
    std::unique_ptr<Backend> b = MakeCpuIsa(2, cpu::BestIsa(), "bf16", invariant);
    EXPECT_EQ(b->KernelPlan(), "");
    std::mt19937 rng(4);
    const int m = 3, n = 40, k = 96;
    std::vector<float> wf = Random(rng, n * k);
    DevTensor x = F32(*b, m, k, Random(rng, m * k)), w = Empty(*b, DType::kBF16, n, k);
    ASSERT_TRUE(b->UploadF32(wf.data(), w.t).ok());
    DevTensor out = Poisoned(*b, m, n);
    ASSERT_TRUE(b->Gemm(x.t, w.t, out.t).ok());
    const std::string plan = b->KernelPlan();
    EXPECT_TRUE(absl::StrContains(plan, "k96/bf16:")) << plan;
    EXPECT_EQ(absl::StrContains(plan, "every M=skinny (batch invariant)"), invariant && !amx)
        << plan;
    EXPECT_EQ(absl::StrContains(plan, "(batch invariant: AMX tiles' chains)"), invariant && amx)
        << plan;
    EXPECT_EQ(absl::StrContains(plan, " 1="), !invariant || amx) << plan;
    EXPECT_EQ(absl::StrContains(plan, " more="), !invariant || amx) << plan;
    if (invariant && amx) {  // only the AMX kernels
      EXPECT_FALSE(absl::StrContains(plan, "skinny") || absl::StrContains(plan, "blocked") ||
                   absl::StrContains(plan, "blas"))
          << plan;
    }
    EXPECT_FALSE(absl::StrContains(plan, "AMX tiles: every M")) << plan;
    // Weights uploaded in the backend's own layout: where that is AMX tiles, the plan says so
    // once a GEMM has read them.
    const Layout layout = b->GemmWeightLayout(DType::kBF16);
    EXPECT_EQ(layout == Layout::kAmxTiles, amx);
    DevTensor wt = Empty(*b, DType::kBF16, n, k, layout);
    ASSERT_TRUE(b->UploadF32(wf.data(), wt.t).ok());
    ASSERT_TRUE(b->Gemm(x.t, wt.t, out.t).ok());
    EXPECT_EQ(absl::StrContains(b->KernelPlan(), "bf16 weights in AMX tiles: every M=amx_tiles"),
              amx)
        << b->KernelPlan();
  }
}

// Batch-1 GEMMs on weights of 1 MiB or more settle the M = 1 stream's prefetch distance on
// passes over them (kernels/cpu/gemm/stream_tuner.h): the backend says it is tuning until it has
// settled, names the outcome in its kernel plan, and every pass computes the same outputs.
// Smaller weights never start it, and a pass that stays in cache is not tuned.
TEST(CpuBackendTest, BatchOneStreamsSettleThePrefetchDistanceOnServedPasses) {
  std::unique_ptr<Backend> b = MakeCpuIsa(2, cpu::BestIsa(), "f32");
  std::mt19937 rng(7);
  const int k = 1024, n = 4096;  // 16 MiB of f32 each, 48 MiB a pass
  DevTensor x = F32(*b, 1, k, Random(rng, k));
  std::vector<DevTensor> ws, outs;
  for (int i = 0; i < 3; ++i) {
    ws.push_back(F32(*b, n, k, Random(rng, size_t{n} * k)));
    outs.push_back(Poisoned(*b, 1, n));
  }
  DevTensor small = F32(*b, 64, k, Random(rng, size_t{64} * k)), small_out = Poisoned(*b, 1, 64);
  ASSERT_TRUE(b->Gemm(x.t, small.t, small_out.t).ok());
  EXPECT_FALSE(b->TuningOnServedSteps()) << "128 KiB of weights started the tuner";
  if (!absl::StrContains(b->KernelPlan(), " 1=skinny") &&
      !absl::StrContains(b->KernelPlan(), "every M=skinny")) {  // batch-invariant: all skinny
    GTEST_SKIP() << "the planner runs M = 1 on another path here: " << b->KernelPlan();
  }
  std::vector<std::vector<float>> first;
  bool tuned_once = false;
  int pass = 0;
  for (; pass < 200; ++pass) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(b->Gemm(x.t, ws[i].t, outs[i].t).ok());
      const std::vector<float> got = ToHost<float>(*b, outs[i].t);
      if (pass == 0) {
        first.push_back(got);
      } else {
        ASSERT_EQ(got, first[i]) << "pass " << pass << ", GEMM " << i;
      }
    }
    tuned_once = tuned_once || b->TuningOnServedSteps();
    if (tuned_once && !b->TuningOnServedSteps()) break;
  }
  EXPECT_TRUE(tuned_once);
  EXPECT_FALSE(b->TuningOnServedSteps()) << "still tuning after " << pass << " passes";
  // The burn-in, then rounds of five candidates.
  EXPECT_LE(pass, cpu::StreamTuner::kBurnInPasses + 5 * cpu::StreamTuner::kRounds + 1);
  EXPECT_TRUE(absl::StrContains(b->KernelPlan(), "served steps")) << b->KernelPlan();

  // 2 MiB a pass: settled after the first one, untuned.
  std::unique_ptr<Backend> c = MakeCpuIsa(2, cpu::BestIsa(), "f32");
  DevTensor cx = F32(*c, 1, 512, Random(rng, 512)),
            cw = F32(*c, 1024, 512, Random(rng, 512 * 1024));
  DevTensor cout = Poisoned(*c, 1, 1024);
  for (int p = 0; p < 2; ++p) ASSERT_TRUE(c->Gemm(cx.t, cw.t, cout.t).ok());
  EXPECT_FALSE(c->TuningOnServedSteps());
  EXPECT_TRUE(absl::StrContains(c->KernelPlan(), "stays in cache: not tuned")) << c->KernelPlan();
}

// The device name says whether the AMX GEMMs run for these weights (bf16 at the AVX-512 level
// where the process may use AMX), never for f32 weights, and why not where the CPU has AMX
// the process may not use.
TEST(CpuBackendTest, DeviceNameSaysWhetherAmxRuns) {
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string name = MakeCpuIsa(1, cpu::BestIsa(), dtype)->device_name();
    const DType w = std::string(dtype) == "bf16" ? DType::kBF16 : DType::kF32;
    EXPECT_EQ(absl::StrContains(name, " +amx,"), cpu::AmxRuns(cpu::BestIsa(), w)) << name;
    const cpu::CpuFeatures& f = cpu::DetectCpuFeatures();
    EXPECT_EQ(absl::StrContains(name, "amx unusable"), f.amx_bf16 && !f.amx_usable) << name;
  }
  EXPECT_FALSE(absl::StrContains(MakeCpuIsa(1, cpu::Isa::kScalar, "bf16")->device_name(), "+amx"));
}

// Cache sizes (the AMX GEMM sizes its packed weight blocks by the L2): each known level is
// no larger than the last level, none past it, and a level that does not exist is 0.
TEST(CpuBackendTest, CacheSizesAreOrderedAndBounded) {
  const size_t last = cpu::LastLevelCacheBytes();
  for (int level : {1, 2, 3}) {
    const size_t bytes = cpu::CacheBytes(level);
    if (bytes == 0 || last == 0) continue;
    EXPECT_LE(bytes, last) << "L" << level;
    EXPECT_GE(bytes, size_t{4} << 10) << "L" << level;
  }
  EXPECT_EQ(cpu::CacheBytes(9), 0u);
}

// Calibration sizes its trials by the pool's threads and the host's cache (Backend::host_compute).
TEST(CpuBackendTest, HostComputeIsThePoolAndTheLastLevelCache) {
  for (int threads : {1, 3}) {
    CpuBackendOptions o;
    o.num_threads = threads;
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(o);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->host_compute().threads, threads);
    EXPECT_EQ((*b)->host_compute().cache_bytes, cpu::LastLevelCacheBytes());
  }
}

TEST(CpuBackendTest, PollTimeOutOfRangeOrMalformedNamesItsSource) {
  CpuBackendOptions o;
  o.num_threads = 2;
  for (int64_t us : {int64_t{0}, int64_t{200}, int64_t{100000}}) {
    o.poll_us = us;
    EXPECT_TRUE(CreateCpuBackend(o).ok()) << us;
  }
  o.poll_us = -1;
  absl::StatusOr<std::unique_ptr<Backend>> bad = CreateCpuBackend(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "poll_us")) << bad.status();
  o.poll_us.reset();
  for (const char* env : {"12x", "-5", "100001"}) {
    setenv("SATURN_CPU_POLL_US", env, 1);
    bad = CreateCpuBackend(o);
    ASSERT_FALSE(bad.ok()) << env;
    EXPECT_TRUE(absl::StrContains(bad.status().message(), "SATURN_CPU_POLL_US")) << bad.status();
  }
  setenv("SATURN_CPU_POLL_US", "0", 1);
  EXPECT_TRUE(CreateCpuBackend(o).ok());
  unsetenv("SATURN_CPU_POLL_US");
}

TEST(CpuBackendTest, AllocationIsAligned) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, size_t{1000003}}) {
    absl::StatusOr<DeviceBuffer> buf = b->Allocate(bytes);
    ASSERT_TRUE(buf.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 64, 0u);
    EXPECT_EQ(buf->bytes(), bytes);
  }
}

// Zero writes every byte (over earlier contents) and leaves the pages resident: a buffer only
// allocated reads as the kernel's shared zero page, which is what Zero is there to prevent
// (the KV cache, model_runner.cc).
TEST(CpuBackendTest, ZeroWritesEveryByteAndCommitsThePages) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 64 * page + 12;  // spans many pages; ends mid-page
  absl::StatusOr<DeviceBuffer> buf = b->Allocate(bytes);
  ASSERT_TRUE(buf.ok());
  const Tensor all = buf->View(DType::kI32, 1, int64_t(bytes / 4));
  std::vector<int32_t> junk(bytes / 4, -1);
  ASSERT_TRUE(b->Upload(junk.data(), all).ok());
  ASSERT_TRUE(b->Zero(all).ok());
  std::vector<int32_t> back(bytes / 4, 7);
  ASSERT_TRUE(b->Download(all, back.data()).ok());
  EXPECT_EQ(std::count(back.begin(), back.end(), 0), int64_t(back.size()));

  absl::StatusOr<DeviceBuffer> fresh = b->Allocate(256 * page);  // never written
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(b->Zero(fresh->View(DType::kI32, 1, int64_t(256 * page / 4))).ok());
  const uintptr_t first = reinterpret_cast<uintptr_t>(fresh->data()) / page * page;
  const size_t span = reinterpret_cast<uintptr_t>(fresh->data()) + 256 * page - first;
  std::vector<unsigned char> resident((span + page - 1) / page);
  ASSERT_EQ(mincore(reinterpret_cast<void*>(first), span, resident.data()), 0);
  for (size_t i = 0; i < resident.size(); ++i) EXPECT_TRUE(resident[i] & 1) << "page " << i;
  EXPECT_TRUE(b->Zero(Tensor{}).ok());  // nothing to do
}

TEST(CpuBackendTest, UploadF32ConvertsWithRoundToNearestEven) {
  std::unique_ptr<Backend> b = MakeCpu(1);
  const float inf = std::numeric_limits<float>::infinity();
  // value, expected bf16 bits, expected f16 bits
  const std::vector<std::tuple<float, uint16_t, uint16_t>> cases = {
      {1.0f, 0x3f80, 0x3c00},
      {-2.0f, 0xc000, 0xc000},
      {0.0f, 0x0000, 0x0000},
      {1.0f + 1.0f / 256, 0x3f80, 0x3c04},      // bf16 tie -> even (down)
      {1.0f + 3.0f / 256, 0x3f82, 0x3c0c},      // bf16 tie -> even (up)
      {1.0f + 1.0f / 2048, 0x3f80, 0x3c00},     // f16 tie -> even (down)
      {1.0f + 3.0f / 2048, 0x3f80, 0x3c02},     // f16 tie -> even (up)
      {65504.0f, 0x4780, 0x7bff},               // f16 max
      {65520.0f, 0x4780, 0x7c00},               // rounds to f16 inf
      {std::ldexp(1.0f, -24), 0x3380, 0x0001},  // smallest f16 subnormal
      {std::ldexp(1.0f, -25), 0x3300, 0x0000},  // tie -> even zero
      {std::ldexp(3.0f, -25), 0x33c0, 0x0002},  // 1.5 ulp -> 2 (even)
      {std::ldexp(1.0f, -14), 0x3880, 0x0400},  // smallest f16 normal
      {std::ldexp(1023.0f, -24) + std::ldexp(1.0f, -25), 0x3880, 0x0400},  // carries to normal
      {inf, 0x7f80, 0x7c00},
      {-inf, 0xff80, 0xfc00},
  };
  std::vector<float> host;
  host.reserve(cases.size());
  for (auto [v, bf, h] : cases) host.push_back(v);
  const int64_t n = host.size();
  DevTensor dbf = Empty(*b, DType::kBF16, 1, n), dh = Empty(*b, DType::kF16, 1, n);
  ASSERT_TRUE(b->UploadF32(host.data(), dbf.t).ok());
  ASSERT_TRUE(b->UploadF32(host.data(), dh.t).ok());
  std::vector<uint16_t> got_bf = ToHost<uint16_t>(*b, dbf.t), got_h = ToHost<uint16_t>(*b, dh.t);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(got_bf[i], std::get<1>(cases[i])) << "bf16 of " << host[i];
    EXPECT_EQ(got_h[i], std::get<2>(cases[i])) << "f16 of " << host[i];
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(b->UploadF32(&nan, dbf.t.RowSlice(0, 1).Reshaped(1, 1)).ok());
  ASSERT_TRUE(b->UploadF32(&nan, dh.t.RowSlice(0, 1).Reshaped(1, 1)).ok());
  EXPECT_EQ(ToHost<uint16_t>(*b, dbf.t)[0] & 0x7fc0, 0x7fc0);
  EXPECT_EQ(ToHost<uint16_t>(*b, dh.t)[0] & 0x7e00, 0x7e00);
  DevTensor di = Empty(*b, DType::kI32, 1, 1);
  EXPECT_EQ(b->UploadF32(host.data(), di.t).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackendTest, OpRecordsHaveKindsAndDeviceIntervals) {
  std::unique_ptr<Backend> b = MakeCpu(2);
  std::mt19937 rng(7);
  const int m = 32, k = 256, n = 256;
  DevTensor x = F32(*b, m, k, Random(rng, m * k)), w = F32(*b, n, k, Random(rng, n * k));
  DevTensor y = Poisoned(*b, m, n), nw = F32(*b, 1, n, Random(rng, n)), z = Poisoned(*b, m, n);
  b->BeginStep(/*per_op_device_times=*/true);
  ASSERT_TRUE(b->Gemm(x.t, w.t, y.t).ok());
  ASSERT_TRUE(b->RmsNorm(y.t, nw.t, 1e-5f, z.t).ok());
  ASSERT_TRUE(b->Add(y.t, z.t, y.t).ok());
  absl::StatusOr<StepTiming> timing = b->EndStep();
  ASSERT_TRUE(timing.ok()) << timing.status();
  ASSERT_EQ(timing->ops.size(), 3u);
  EXPECT_EQ(timing->ops[0].kind, OpKind::kGemm);
  EXPECT_EQ(timing->ops[1].kind, OpKind::kRmsNorm);
  EXPECT_EQ(timing->ops[2].kind, OpKind::kAdd);
  EXPECT_TRUE(timing->per_op_device_times);
  EXPECT_FALSE(timing->graph_replayed);
  double prev_end = 0;
  for (const OpRecord& op : timing->ops) {
    EXPECT_GE(op.device_begin_us, prev_end);
    EXPECT_GT(op.device_end_us, op.device_begin_us);
    EXPECT_GE(op.device_begin_us, op.issue_begin_us);
    EXPECT_LE(op.device_end_us, op.issue_end_us);
    EXPECT_GT(op.cost.bytes, 0);
    prev_end = op.device_end_us;
  }
  EXPECT_GT(timing->ops[0].cost.flops, 0);
  EXPECT_GT(timing->device_busy_us, 0);
  EXPECT_GE(timing->device_span_us, timing->device_busy_us);

  b->BeginStep(/*per_op_device_times=*/false);
  ASSERT_TRUE(b->Gemm(x.t, w.t, y.t).ok());
  timing = b->EndStep();
  ASSERT_TRUE(timing.ok());
  ASSERT_EQ(timing->ops.size(), 1u);
  EXPECT_LT(timing->ops[0].device_begin_us, 0);
}

}  // namespace
}  // namespace saturn::testing
