// NullBackend: a CPU backend's memory under ops that do nothing.
#include "kernels/null_backend.h"

#include <string>
#include <utility>

#include "kernels/base/clock.h"
#include "kernels/cpu/cpu_backend.h"

namespace saturn {
namespace {

class NullBackend final : public Backend {
 public:
  explicit NullBackend(std::unique_ptr<Backend> memory) : memory_(std::move(memory)) {}

  std::string name() const override { return "null"; }
  std::string device_name() const override { return "null (ops not run)"; }
  DType compute_dtype() const override { return DType::kF32; }
  size_t device_memory_bytes() const override { return memory_->device_memory_bytes(); }
  bool per_op_timing_is_cheap() const override { return true; }

  // Buffers are real (the engine reads its token buffer back); weights are never written,
  // so their pages are never touched.
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override { return memory_->Allocate(bytes); }
  absl::Status Upload(const void* host, const Tensor& dst) override {
    return memory_->Upload(host, dst);
  }
  absl::Status Zero(const Tensor&) override { return absl::OkStatus(); }
  absl::Status UploadF32(const float*, const Tensor&) override { return absl::OkStatus(); }
  absl::Status Download(const Tensor& src, void* host) override {
    return memory_->Download(src, host);
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  void Free(void*) override {}  // buffers belong to memory_

 protected:
  absl::Status DoEmbedding(const Tensor&, const Tensor&, const Tensor&) override { return {}; }
  absl::Status DoGemm(const Tensor&, const Tensor&, const Tensor&) override { return {}; }
  absl::Status DoRmsNorm(const Tensor&, const Tensor&, float, const Tensor&) override { return {}; }
  absl::Status DoAddRmsNorm(const Tensor&, const Tensor&, const Tensor&, float,
                            const Tensor&) override {
    return {};
  }
  absl::Status DoRope(const Tensor&, const Tensor&, const Tensor&, int,
                      const RopeParams&) override {
    return {};
  }
  absl::Status DoKvWrite(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&) override {
    return {};
  }
  absl::Status DoAttention(const Tensor&, const Tensor&, const Tensor&, const AttentionBatch&,
                           const AttentionShape&, const Tensor&) override {
    return {};
  }
  absl::Status DoSwiGlu(const Tensor&, const Tensor&) override { return {}; }
  absl::Status DoAdd(const Tensor&, const Tensor&, const Tensor&) override { return {}; }
  absl::Status DoGatherRows(const Tensor&, const Tensor&, const Tensor&) override { return {}; }
  absl::Status DoSample(const Tensor&, const SamplingBatch&, const Tensor&) override { return {}; }
  absl::Status DoCopy(const Tensor&, const Tensor&) override { return {}; }
  // Ops run on the calling thread (not at all): the host clock is their device clock.
  void MarkOpDeviceBegin(size_t index) override { ops_[index].device_begin_us = Rel(); }
  void MarkOpDeviceEnd(size_t index) override { ops_[index].device_end_us = Rel(); }
  absl::Status ResolveDeviceTimes(StepTiming*) override { return absl::OkStatus(); }

 private:
  double Rel() const { return NowUs() - step_host_start_us_; }
  std::unique_ptr<Backend> memory_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateNullBackend() {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateCpuBackend(1);
  if (!cpu.ok()) return cpu.status();
  return std::make_unique<NullBackend>(std::move(*cpu));
}

}  // namespace saturn
