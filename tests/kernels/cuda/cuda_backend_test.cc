// The CUDA backend's own behaviour: clean failure without a device, the kernel set names
// (--cuda_kernels), identity, chunked f32 -> bf16 upload, step timing (per-op events and the
// span), graph capture/replay equal to eager with device-resident context lengths, NVML and the
// occupancy report.
#include "kernels/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace saturn::testing {
namespace {

TEST(CudaBackendTest, CreateFailsCleanlyOrDescribesTheDevice) {
  // Runs everywhere: without a device this is the path under test.
  auto b = CreateCudaBackend(0);
  if (!b.ok()) {
    EXPECT_FALSE(b.status().message().empty());
    EXPECT_NE(b.status().code(), absl::StatusCode::kOk);
    auto any = CreateBackend("cuda");
    EXPECT_FALSE(any.ok());
    auto fallback = CreateBackend("auto", 1);
    ASSERT_TRUE(fallback.ok()) << fallback.status();
    EXPECT_EQ((*fallback)->name(), "cpu");
    GTEST_SKIP() << "no CUDA device: skipping (creation failed cleanly: " << b.status() << ")";
  }
  EXPECT_EQ((*b)->name(), "cuda");
  EXPECT_FALSE((*b)->device_name().empty());
  EXPECT_GT((*b)->device_memory_bytes(), size_t{1} << 30);
  EXPECT_EQ((*b)->compute_dtype(), DType::kBF16);
  EXPECT_FALSE((*b)->per_op_timing_is_cheap());
  EXPECT_TRUE((*b)->SupportsGraphs());
  EXPECT_FALSE(CreateCudaBackend(1 << 20).ok());
}

// The factory reads --cuda_kernels before it picks a backend, so this runs everywhere.
TEST(CudaBackendTest, KernelSetNamesAndTheirAliases) {
  for (const char* v : {"baseline", "fused", "v1", "v2"}) {
    EXPECT_TRUE(CreateBackend("cpu", 1, "f32", "auto", "auto", v).ok()) << v;
  }
  const absl::Status bad = CreateBackend("cpu", 1, "f32", "auto", "auto", "v3").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "cuda_kernels")) << bad;
}

TEST(CudaBackendTest, UploadF32ConvertsThroughTheStagingBuffer) {
  SATURN_REQUIRE_CUDA(gpu);
  const int64_t n = (9 << 20) + 5;  // more than one 8M-float staging chunk
  const auto host = RandomValues(static_cast<size_t>(n), 31);
  DevTensor d = ComputeTensor(gpu.get(), 1, n, host);
  EXPECT_EQ(ReadFloats(gpu.get(), d.t), host);  // bf16-exact values survive exactly
}

TEST(CudaBackendTest, StepTimingPerOpAndSpan) {
  SATURN_REQUIRE_CUDA(gpu);
  const int rows = 64, cols = 4096;
  const auto x = RandomValues(rows * cols, 32);
  DevTensor a = ComputeTensor(gpu.get(), rows, cols, x), w = ComputeTensor(gpu.get(), 1, cols, x),
            out = ComputeTensor(gpu.get(), rows, cols, {});
  ASSERT_TRUE(gpu->Synchronize().ok());
  for (bool per_op : {true, false}) {
    SCOPED_TRACE(per_op);
    gpu->BeginStep(per_op);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(gpu->RmsNorm(a.t, w.t, 1e-5f, out.t).ok());
      ASSERT_TRUE(gpu->Add(a.t, out.t, out.t).ok());
    }
    auto t = gpu->EndStep();
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->ops.size(), 8u);
    EXPECT_EQ(t->per_op_device_times, per_op);
    EXPECT_GT(t->device_span_us, 0.0);
    EXPECT_GT(t->device_busy_us, 0.0);
    EXPECT_LE(t->device_busy_us, t->device_span_us + 1e-3);
    EXPECT_FALSE(t->graph_replayed);
    double prev_end = 0;
    for (const OpRecord& op : t->ops) {
      EXPECT_GE(op.issue_end_us, op.issue_begin_us);
      if (!per_op) {
        EXPECT_LT(op.device_begin_us, 0);
        continue;
      }
      EXPECT_GE(op.device_begin_us, 0);
      EXPECT_GE(op.device_end_us, op.device_begin_us);
      EXPECT_GE(op.device_begin_us, prev_end - 1.0);  // one stream: in order (event jitter)
      prev_end = op.device_end_us;
    }
  }
}

// Decode attention + add captured once, replayed after the inputs (including the device
// context lengths) change: the replay must equal an eager run on the new inputs.
TEST(CudaBackendTest, GraphReplayEqualsEagerWithNewContextLengths) {
  SATURN_REQUIRE_CUDA(gpu);
  const int seqs = 3, heads = 4, kv_heads = 2, hd = 64, bs = 16, max_blocks = 8;
  const int rows = seqs * max_blocks * bs, qw = heads * hd, kvw = kv_heads * hd;
  std::vector<int32_t> qstart{0, 1, 2, 3}, tables(seqs * max_blocks);
  for (int i = 0; i < seqs * max_blocks; ++i) tables[i] = (i * 5) % (seqs * max_blocks);
  DevTensor q = ComputeTensor(gpu.get(), seqs, qw, RandomValues(seqs * qw, 33)),
            kc = ComputeTensor(gpu.get(), rows, kvw, RandomValues(rows * kvw, 34)),
            vc = ComputeTensor(gpu.get(), rows, kvw, RandomValues(rows * kvw, 35)),
            out = ComputeTensor(gpu.get(), seqs, qw, {}),
            sum = ComputeTensor(gpu.get(), seqs, qw, {}),
            qs = RawTensor(gpu.get(), DType::kI32, 1, seqs + 1, qstart),
            ctx = RawTensor(gpu.get(), DType::kI32, 1, seqs, std::vector<int32_t>{1, 2, 3}),
            tab = RawTensor(gpu.get(), DType::kI32, seqs, max_blocks, tables);
  const AttentionShape shape{heads, kv_heads, hd, bs, 0.125f};
  // Decode rows over contexts 1, 2, 3 at capture: 6 attended positions, 6 cached rows.
  const AttentionBatch batch{qs.t, ctx.t, tab.t, seqs, 1, max_blocks * bs, 6, 6};
  auto issue = [&]() {
    EXPECT_TRUE(gpu->Attention(q.t, kc.t, vc.t, batch, shape, out.t).ok());
    EXPECT_TRUE(gpu->Add(out.t, q.t, sum.t).ok());
  };
  ASSERT_TRUE(gpu->Synchronize().ok());
  gpu->BeginStep(true);
  ASSERT_TRUE(gpu->BeginGraphCapture().ok());
  issue();
  auto handle = gpu->EndGraphCapture();
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(gpu->EndStep().ok());
  for (const std::vector<int32_t>& lens :
       {std::vector<int32_t>{100, 7, 128}, std::vector<int32_t>{1, 64, 17}}) {
    const std::vector<int32_t> l = lens;
    ASSERT_TRUE(gpu->Upload(l.data(), ctx.t).ok());
    gpu->BeginStep(true);
    ASSERT_TRUE(gpu->ReplayGraph(*handle).ok());
    auto t = gpu->EndStep();
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->graph_replayed);
    ASSERT_EQ(t->ops.size(), 2u);
    EXPECT_EQ(t->replayed_ops, 2);  // both from the one launch
    EXPECT_EQ(t->ops[0].kind, OpKind::kAttention);
    // The capture-time cost; the runner restates it from each step's contexts
    // (model_runner_graph_test.cc checks that on the host).
    EXPECT_DOUBLE_EQ(t->ops[0].cost.flops, 4.0 * 6 * heads * hd);
    EXPECT_GT(t->device_span_us, 0.0);
    const auto replayed = ReadFloats(gpu.get(), sum.t);
    Poison(gpu.get(), sum.t);
    gpu->BeginStep(false);
    issue();
    ASSERT_TRUE(gpu->EndStep().ok());
    EXPECT_EQ(ReadFloats(gpu.get(), sum.t), replayed);  // same kernels, same inputs: bitwise
  }
  EXPECT_FALSE(gpu->ReplayGraph(*handle + 1).ok());
}

TEST(CudaBackendTest, NvmlAndOccupancyReport) {
  // NVML: a value in range, or a clean error (no driver library here).
  auto util = NvmlGpuUtilizationPercent(0);
  if (util.ok()) {
    EXPECT_GE(*util, 0);
    EXPECT_LE(*util, 100);
  } else {
    EXPECT_FALSE(util.status().message().empty());
  }
  SATURN_REQUIRE_CUDA(gpu);
  // The backend's telemetry is the same counter, for its own device: a share or -1.
  const double share = gpu->DeviceUtilization();
  EXPECT_TRUE(share == -1 || (share >= 0 && share <= 1)) << share;
  EXPECT_EQ(share == -1, !util.ok());
  DevTensor a = ComputeTensor(gpu.get(), 8, 512, RandomValues(8 * 512, 36));
  DevTensor w = ComputeTensor(gpu.get(), 1, 512, RandomValues(512, 37));
  ASSERT_TRUE(gpu->RmsNorm(a.t, w.t, 1e-5f, a.t).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  auto report = KernelOccupancyReport(0);
  ASSERT_TRUE(report.ok()) << report.status();
  bool found = false;
  for (const KernelOccupancy& k : *report) {
    EXPECT_GT(k.num_sms, 0);
    EXPECT_GT(k.max_active_blocks_per_sm, 0) << k.family;
    EXPECT_GT(k.theoretical_occupancy, 0.0);
    EXPECT_LE(k.theoretical_occupancy, 1.0);
    if (k.family == "rms_norm") {
      found = true;
      EXPECT_EQ(k.grid_blocks, 8);
      EXPECT_FALSE(k.fills_device);
    }
  }
  EXPECT_TRUE(found);
}

TEST(CudaBackendTest, ShapeErrorsAreStatusesNotCrashes) {
  SATURN_REQUIRE_CUDA(gpu);
  DevTensor a = ComputeTensor(gpu.get(), 4, 64, RandomValues(256, 38));
  DevTensor b = ComputeTensor(gpu.get(), 4, 32, RandomValues(128, 39));
  EXPECT_EQ(gpu->Add(a.t, b.t, a.t).code(), absl::StatusCode::kInvalidArgument);
  DevTensor i64 = RawTensor(gpu.get(), DType::kI64, 1, 4, std::vector<int64_t>{0, 1, 2, 3});
  EXPECT_FALSE(gpu->Add(i64.t, i64.t, i64.t).ok());  // no integer add on CUDA
  EXPECT_TRUE(gpu->Synchronize().ok());
}

}  // namespace
}  // namespace saturn::testing
