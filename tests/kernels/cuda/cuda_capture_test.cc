// The CUDA backend's capture and step-timing rules (review 2026-12-01, items 4, 5, 8, 9, 10):
// host round trips refused during a capture and a Free deferred to its end, an aborted
// capture that leaves no graph, a replay's issue time given to its first op only, the step
// end marked before the copy back, and every entry point usable from another thread. Skips
// without a device; tests/engine/model_runner_graph_test.cc checks the runner's side on the host.
#include <gtest/gtest.h>

#include <thread>

#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace saturn::testing {
namespace {

TEST(CudaCaptureTest, HostRoundTripsAreRefusedDuringCaptureAndFreeIsDeferred) {
  SATURN_REQUIRE_CUDA(gpu);
  DevTensor a = ComputeTensor(gpu.get(), 4, 256, RandomValues(1024, 1));
  DevTensor out = ComputeTensor(gpu.get(), 4, 256, {});
  auto doomed = gpu->Allocate(1 << 20);
  ASSERT_TRUE(doomed.ok());
  std::vector<float> host(1024, 1.0f);
  ASSERT_TRUE(gpu->Synchronize().ok());
  gpu->BeginStep(false);
  ASSERT_TRUE(gpu->BeginGraphCapture().ok());
  const auto refused = absl::StatusCode::kFailedPrecondition;
  EXPECT_EQ(gpu->Allocate(64).status().code(), refused);
  EXPECT_EQ(gpu->Upload(host.data(), a.t).code(), refused);
  EXPECT_EQ(gpu->UploadF32(host.data(), a.t).code(), refused);
  EXPECT_EQ(gpu->Download(a.t, host.data()).code(), refused);
  EXPECT_EQ(gpu->Synchronize().code(), refused);
  doomed->Reset();  // a cudaFree here would invalidate the capture
  ASSERT_TRUE(gpu->Add(a.t, a.t, out.t).ok());
  auto handle = gpu->EndGraphCapture();
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(gpu->EndStep().ok());
  gpu->BeginStep(false);
  ASSERT_TRUE(gpu->ReplayGraph(*handle).ok());
  ASSERT_TRUE(gpu->EndStep().ok());
  const auto x = ReadFloats(gpu.get(), a.t), y = ReadFloats(gpu.get(), out.t);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] + x[i]) << i;
}

TEST(CudaCaptureTest, AnAbortedCaptureLeavesNoGraph) {
  SATURN_REQUIRE_CUDA(gpu);
  DevTensor a = ComputeTensor(gpu.get(), 4, 256, RandomValues(1024, 2));
  EXPECT_EQ(gpu->AbortGraphCapture().code(), absl::StatusCode::kFailedPrecondition);
  const size_t mem0 = gpu->graph_memory_bytes();
  gpu->BeginStep(false);
  ASSERT_TRUE(gpu->BeginGraphCapture().ok());
  ASSERT_TRUE(gpu->Add(a.t, a.t, a.t).ok());
  ASSERT_TRUE(gpu->AbortGraphCapture().ok());
  auto t = gpu->EndStep();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->ops.empty());  // captured ops were neither run nor kept
  EXPECT_EQ(gpu->graph_memory_bytes(), mem0);
  EXPECT_EQ(gpu->ReplayGraph(0).code(), absl::StatusCode::kInvalidArgument);
  // The stream is usable again and the next capture gets the first handle.
  ASSERT_TRUE(gpu->Synchronize().ok());
  gpu->BeginStep(false);
  ASSERT_TRUE(gpu->BeginGraphCapture().ok());
  ASSERT_TRUE(gpu->Add(a.t, a.t, a.t).ok());
  auto handle = gpu->EndGraphCapture();
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(*handle, 0);
  ASSERT_TRUE(gpu->EndStep().ok());
}

TEST(CudaCaptureTest, AReplayCountsItsIssueTimeOnce) {
  SATURN_REQUIRE_CUDA(gpu);
  DevTensor a = ComputeTensor(gpu.get(), 8, 512, RandomValues(4096, 3));
  DevTensor w = ComputeTensor(gpu.get(), 1, 512, RandomValues(512, 4));
  DevTensor out = ComputeTensor(gpu.get(), 8, 512, {});
  ASSERT_TRUE(gpu->Synchronize().ok());
  gpu->BeginStep(false);
  ASSERT_TRUE(gpu->BeginGraphCapture().ok());
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(gpu->RmsNorm(a.t, w.t, 1e-5f, out.t).ok());
    ASSERT_TRUE(gpu->Add(out.t, a.t, out.t).ok());
  }
  auto handle = gpu->EndGraphCapture();
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(gpu->EndStep().ok());
  gpu->BeginStep(false);
  ASSERT_TRUE(gpu->ReplayGraph(*handle).ok());
  gpu->MarkStepEnd();
  auto t = gpu->EndStep();
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->ops.size(), 32u);
  EXPECT_TRUE(t->graph_replayed);
  EXPECT_DOUBLE_EQ(t->issue_us, t->ops[0].issue_end_us - t->ops[0].issue_begin_us);
  for (size_t i = 1; i < t->ops.size(); ++i) {
    EXPECT_EQ(t->ops[i].issue_begin_us, t->ops[i].issue_end_us) << i;
  }
  EXPECT_GT(t->device_span_us, 0.0);
}

// A step's span ends at MarkStepEnd: a 256 MiB copy back after it stays out of the span,
// while without the mark the span runs to EndStep and takes the copy in.
TEST(CudaCaptureTest, StepEndIsMarkedBeforeTheCopyBack) {
  SATURN_REQUIRE_CUDA(gpu);
  const int64_t n = 64 << 20;  // f32: 256 MiB
  auto big = gpu->Allocate(n * sizeof(float));
  ASSERT_TRUE(big.ok());
  const Tensor bt = big->View(DType::kF32, 1, n);
  std::vector<float> host(n);
  DevTensor a = ComputeTensor(gpu.get(), 4, 256, RandomValues(1024, 5));
  double span[2] = {0, 0};
  for (int marked = 0; marked < 2; ++marked) {
    ASSERT_TRUE(gpu->Synchronize().ok());
    gpu->BeginStep(false);
    ASSERT_TRUE(gpu->Add(a.t, a.t, a.t).ok());
    if (marked) gpu->MarkStepEnd();
    ASSERT_TRUE(gpu->Download(bt, host.data()).ok());
    auto t = gpu->EndStep();
    ASSERT_TRUE(t.ok()) << t.status();
    span[marked] = t->device_span_us;
  }
  EXPECT_GT(span[1], 0.0);
  EXPECT_LT(span[1] * 10, span[0]) << "marked " << span[1] << " us, unmarked " << span[0];
}

TEST(CudaCaptureTest, EntryPointsWorkFromAThreadThatNeverTouchedCuda) {
  SATURN_REQUIRE_CUDA(gpu);
  const auto x = RandomValues(2048, 6);
  DevTensor a = ComputeTensor(gpu.get(), 8, 256, x);
  std::vector<float> got;
  absl::Status status;
  std::thread other([&] {
    auto buf = gpu->Allocate(2048 * sizeof(float));
    if (!buf.ok()) {
      status = buf.status();
      return;
    }
    const Tensor f = buf->View(DType::kF32, 8, 256);
    status = gpu->UploadF32(x.data(), f);
    if (status.ok()) status = gpu->Synchronize();
    got.resize(2048);
    if (status.ok()) status = gpu->Download(f, got.data());
  });  // buf was freed on that thread as well
  other.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(got, x);  // bf16-exact values, f32 on the device
  EXPECT_EQ(ReadFloats(gpu.get(), a.t), x);
}

}  // namespace
}  // namespace saturn::testing
