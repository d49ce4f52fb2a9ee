// The CUDA backend's class, shared by its two files: cuda_backend.cc (set-up, memory, op
// dispatch, the factory) and cuda_backend_steps.cc (step timing and CUDA graphs). Internal to
// kernels/cuda/; callers use cuda_backend.h.
//
// CudaBackend: memory, the stream and cuBLAS handle, op dispatch to kernels/cuda/*, event
// timing and CUDA graphs. Never waits for the device except in Download/Synchronize/EndStep
// (and EndGraphCapture, which uploads the graph). Never exits: every CUDA failure becomes a
// Status.
//
// Threads: every public entry point first makes this backend's device current on the calling
// thread (UseDevice), so buffers freed or copied from another thread act on the right device.
// During a capture, Allocate/Upload/UploadF32/Download/Synchronize are refused with
// FAILED_PRECONDITION (each would invalidate the capture) and Free is deferred to its end.
//
// Timing: per-op begin/end events come from a pool reused every step and are resolved
// against a step-start event recorded in BeginStep. The step-end event is recorded by
// MarkStepEnd, right after the last op and before the tokens' copy back. A graph replay is timed as
// one span (its ops keep their FLOPs/bytes but no per-op device interval): events baked into the
// graph would cost every replay, not only the sampled steps. See docs/CUDA.md.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/base/clock.h"
#include "kernels/base/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernel_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/op_record.h"

namespace saturn {
namespace cuda_detail {

inline constexpr size_t kCublasWorkspaceBytes = 32u << 20;  // Hopper's recommended size
inline constexpr size_t kStagingFloats = 8u << 20;          // 32 MiB f32 staging for UploadF32

// cudaSetDevice for the calling thread, skipped when this thread already made `device`
// current through here (every device switch in the CUDA backend goes through this).
inline cudaError_t UseDevice(int device) {
  thread_local int current = -1;
  if (current == device) return cudaSuccess;
  const cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) current = device;
  return e;
}

inline absl::Status RefuseDuringCapture(bool capturing, const char* what) {
  if (!capturing) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   " during CUDA graph capture (it would invalidate the capture; the runner "
                   "uploads and allocates before BeginGraphCapture)"));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const cudaDeviceProp& prop, bool batch_invariant, bool fused_kernels)
      : device_(device),
        prop_(prop),
        batch_invariant_(batch_invariant),
        fused_kernels_(fused_kernels && !batch_invariant) {}
  ~CudaBackend() override;
  absl::Status Init();

  std::string name() const override { return "cuda"; }
  std::string device_name() const override {
    return fused_kernels_ ? absl::StrCat(prop_.name, " (fused kernels)") : std::string(prop_.name);
  }
  DType compute_dtype() const override { return DType::kBF16; }
  bool batch_invariant() const override { return batch_invariant_; }
  size_t device_memory_bytes() const override { return prop_.totalGlobalMem; }
  bool per_op_timing_is_cheap() const override { return false; }
  SpecCeilings spec_ceilings() const override;
  double DeviceUtilization() const override {
    absl::StatusOr<int> pct = NvmlGpuUtilizationPercent(device_);
    return pct.ok() ? *pct / 100.0 : -1;
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "Allocate"));
    if (bytes == 0) return DeviceBuffer();
    CUDA_CHECK(UseDevice(device_));
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return DeviceBuffer(this, p, bytes);
  }
  void Free(void* ptr) override;
  absl::Status Upload(const void* host, const Tensor& dst) override {
    RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "Upload"));
    if (dst.bytes() == 0) return absl::OkStatus();
    CUDA_CHECK(UseDevice(device_));
    CUDA_CHECK(cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, stream_));
    return absl::OkStatus();
  }
  absl::Status Zero(const Tensor& dst) override {
    RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "Zero"));
    if (dst.bytes() == 0) return absl::OkStatus();
    CUDA_CHECK(UseDevice(device_));
    CUDA_CHECK(cudaMemsetAsync(dst.data, 0, dst.bytes(), stream_));
    return absl::OkStatus();
  }
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "AllocateHost"));
    CUDA_CHECK(UseDevice(device_));
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault));
    return p;
  }
  void FreeHost(void* ptr) override {
    if (ptr == nullptr) return;
    (void)UseDevice(device_);
    (void)cudaFreeHost(ptr);
  }
  absl::Status UploadF32(const float* host, const Tensor& dst) override;
  absl::Status Download(const Tensor& src, void* host) override {
    RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "Download"));
    CUDA_CHECK(UseDevice(device_));
    if (src.bytes() > 0) {
      CUDA_CHECK(cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }
  absl::Status DownloadAsync(const Tensor& src, void* host) override {
    RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "DownloadAsync"));
    CUDA_CHECK(UseDevice(device_));
    if (src.bytes() > 0) {  // host is page-locked (AllocateHost): the copy is truly async
      CUDA_CHECK(cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
    }
    return absl::OkStatus();
  }
  bool RunsAsync() const override { return true; }
  absl::Status Synchronize() override {
    RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "Synchronize"));
    CUDA_CHECK(UseDevice(device_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  void BeginStep(bool per_op_device_times) override;
  void MarkStepEnd() override;
  absl::StatusOr<StepTiming> EndStep() override {
    CUDA_CHECK(UseDevice(device_));
    return Backend::EndStep();
  }
  bool SupportsGraphs() const override { return true; }
  absl::Status BeginGraphCapture() override;
  absl::StatusOr<int> EndGraphCapture() override;
  absl::Status AbortGraphCapture() override;
  absl::Status ReplayGraph(int handle) override;
  absl::Status ReleaseGraph(int handle) override;
  // GPU clocks idle low and ramp under load; calibration's first GEMM trials ran slow while
  // they did (docs/CUDA.md).
  double clock_warmup_s() const override { return 0.5; }
  size_t graph_memory_bytes() const override { return graph_memory_bytes_; }

 protected:
  absl::Status DoEmbedding(const Tensor& ids, const Tensor& table, const Tensor& out) override {
    OpScope op(this, OpKind::kEmbedding);
    return gpu::Embedding(stream_, ids, table, out);
  }
  absl::Status DoGemm(const Tensor& x, const Tensor& w, const Tensor& out) override {
    OpScope op(this, OpKind::kGemm);
    if (batch_invariant_) return gpu::GemmInvariant(stream_, x, w, out);
    const Tensor outs[] = {out};
    if (fused_kernels_ && gpu::GemmSkinnyApplies(x, w, outs)) {
      return gpu::GemmSkinny(stream_, prop_.multiProcessorCount, x, w, outs);
    }
    return gpu::Gemm(cublas_, x, w, out);
  }
  // Fused set at few rows: the fused projection's parts in one skinny launch (baseline: one
  // GEMM a part).
  absl::Status DoGemmSplit(const Tensor& x, const Tensor& w,
                           absl::Span<const Tensor> outs) override {
    if (fused_kernels_ && gpu::GemmSkinnyApplies(x, w, outs)) {
      OpScope op(this, OpKind::kGemm);
      return gpu::GemmSkinny(stream_, prop_.multiProcessorCount, x, w, outs);
    }
    return Backend::DoGemmSplit(x, w, outs);
  }
  // Fused set at few rows: SwiGLU in the skinny GEMM's epilogue (baseline: a GEMM, then
  // swiglu.cu).
  bool FusesGemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& act) const override {
    return fused_kernels_ && gpu::GemmSkinnySwiGluApplies(x, w, act);
  }
  absl::Status DoGemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& /*gate_up*/,
                            const Tensor& act) override {
    OpScope op(this, OpKind::kGemmSwiGlu);
    return gpu::GemmSkinnySwiGlu(stream_, prop_.multiProcessorCount, x, w, act);
  }
  absl::Status DoRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                         const Tensor& out) override {
    OpScope op(this, OpKind::kRmsNorm);
    return gpu::RmsNorm(stream_, x, weight, eps, out);
  }
  absl::Status DoAddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                            float eps, const Tensor& out) override {
    OpScope op(this, OpKind::kAddRmsNorm);
    return gpu::AddRmsNorm(stream_, x, residual, weight, eps, out);
  }
  absl::Status DoRope(const Tensor& q, const Tensor& k, const Tensor& positions, int head_dim,
                      const RopeParams& rope) override {
    OpScope op(this, OpKind::kRope);
    return gpu::Rope(stream_, q, k, positions, head_dim, rope);
  }
  absl::Status DoKvWrite(const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                         const Tensor& k_cache, const Tensor& v_cache) override {
    OpScope op(this, OpKind::kKvWrite);
    return gpu::KvWrite(stream_, k, v, slot_mapping, k_cache, v_cache);
  }
  bool FusesRopeKvWrite() const override { return fused_kernels_; }
  absl::Status DoRopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& positions, int head_dim, const RopeParams& rope,
                             const Tensor& slot_mapping, const Tensor& k_cache,
                             const Tensor& v_cache) override {
    OpScope op(this, OpKind::kRopeKvWrite);
    return gpu::RopeKvWrite(stream_, q, k, v, positions, head_dim, rope, slot_mapping, k_cache,
                            v_cache);
  }
  absl::Status DoAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const AttentionBatch& batch, const AttentionShape& shape,
                           const Tensor& out) override {
    // Batch-invariant: every row through the prefill kernel, whose per-row key order depends
    // on the row's position alone; the decode kernel splits keys across warps differently.
    const bool decode = batch.max_query_len <= 1 && !batch_invariant_;
    OpScope op(this, decode ? "attention_decode" : "attention_prefill");
    if (decode && fused_kernels_ && gpu::AttentionDecodeSplitApplies(shape)) {
      const int splits = gpu::DecodeSplits(
          batch.num_seqs, shape.num_heads, shape.num_kv_heads, shape.head_dim,
          batch.block_tables.cols * int64_t{shape.block_size}, prop_.multiProcessorCount,
          static_cast<int64_t>(gpu::kSplitWorkspaceBytes / sizeof(float)));
      return gpu::AttentionDecodeSplit(
          stream_, q, k_cache, v_cache, batch, shape, out, split_workspace_,
          static_cast<int64_t>(gpu::kSplitWorkspaceBytes / sizeof(float)), splits);
    }
    if (decode) {
      return gpu::AttentionDecode(stream_, q, k_cache, v_cache, batch, shape, out);
    }
    return gpu::AttentionPrefill(stream_, q, k_cache, v_cache, batch, shape, out);
  }
  absl::Status DoSwiGlu(const Tensor& gate_up, const Tensor& out) override {
    OpScope op(this, OpKind::kSwiGlu);
    return gpu::SwiGlu(stream_, gate_up, out);
  }
  absl::Status DoAdd(const Tensor& a, const Tensor& b, const Tensor& out) override {
    OpScope op(this, OpKind::kAdd);
    return gpu::Add(stream_, a, b, out);
  }
  absl::Status DoGatherRows(const Tensor& x, const Tensor& indices, const Tensor& out) override {
    OpScope op(this, OpKind::kGatherRows);
    return gpu::GatherRows(stream_, x, indices, out);
  }
  absl::Status DoSample(const Tensor& logits, const SamplingBatch& params,
                        const Tensor& tokens) override {
    OpScope op(this, OpKind::kSample);
    if (fused_kernels_) {
      return gpu::SampleSplit(stream_, prop_.multiProcessorCount, logits, params, tokens,
                              sample_workspace_);
    }
    return gpu::Sample(stream_, logits, params, tokens);
  }
  absl::Status DoCopy(const Tensor& src, const Tensor& dst) override {
    OpScope op(this, OpKind::kCopy);
    return gpu::Copy(stream_, src, dst);
  }
  // Tensor parallelism on CUDA sums over NCCL (issue 51), which this build does not have yet:
  // the host-memory sum of the base class would read device pointers.
  absl::Status DoAllReduce(const Tensor& /*x*/) override {
    return absl::UnimplementedError(
        "tensor_parallel: the cuda backend sums over NCCL, which is not built yet; use "
        "--backend=cpu");
  }
  absl::Status DoGatherColumns(const Tensor& /*part*/, const std::vector<int64_t>& /*counts*/,
                               const Tensor& /*whole*/) override {
    return absl::UnimplementedError(
        "tensor_parallel: the cuda backend gathers over NCCL, which is not built yet; use "
        "--backend=cpu");
  }

  void MarkOpDeviceBegin(size_t index) override { MarkOp(index, /*end=*/false); }
  void MarkOpDeviceEnd(size_t index) override { MarkOp(index, /*end=*/true); }
  absl::Status ResolveDeviceTimes(StepTiming* timing) override;

 private:
  // NVTX range around one op's issue, plus the step's first-op marker for the span.
  class OpScope {
   public:
    // The NVTX range is named as the step records name the op (kOpKindNames).
    OpScope(CudaBackend* b, OpKind kind) : OpScope(b, OpKindName(kind)) {}
    // Attention's range names the kernel too: attention_decode or attention_prefill.
    OpScope(CudaBackend* b, const char* name) {
      nvtxRangePushA(name);
      if (!b->capturing_ && !b->first_op_recorded_) {
        b->first_op_recorded_ = cudaEventRecord(b->first_op_event_, b->stream_) == cudaSuccess;
      }
    }
    ~OpScope() { nvtxRangePop(); }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;
  };

  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<OpRecord> ops;
    size_t memory_bytes = 0;
  };

  // Ends the stream capture and returns its graph (null when the capture was invalidated).
  absl::StatusOr<cudaGraph_t> FinishCapture();
  void FreeDeferred();
  cudaEvent_t AcquireEvent();
  void MarkOp(size_t index, bool end);
  absl::StatusOr<double> ElapsedUs(cudaEvent_t from, cudaEvent_t to) const;

  int device_;
  cudaDeviceProp prop_;
  bool batch_invariant_ = false;  // gemm_invariant.cu and the prefill attention kernel only
  // --cuda_kernels=fused: gemm_skinny.cu (with its SwiGLU epilogue), attention_decode_split.cu,
  // rope_kv_write.cu.
  bool fused_kernels_ = false;
  float* split_workspace_ = nullptr;  // split attention's partials, gpu::kSplitWorkspaceBytes
  gpu::GreedySplitWorkspace sample_workspace_;  // split greedy sampling's partials
  void* sample_workspace_memory_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  float* staging_ = nullptr;

  // Timing.
  std::vector<cudaEvent_t> event_pool_;
  size_t events_used_ = 0;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> op_events_;  // parallel to ops_
  cudaEvent_t step_start_event_ = nullptr;
  cudaEvent_t step_end_event_ = nullptr;
  cudaEvent_t first_op_event_ = nullptr;
  bool first_op_recorded_ = false;
  bool step_end_recorded_ = false;
  bool nvtx_step_open_ = false;
  bool graph_replayed_ = false;

  // Graphs. capturing_ is read by the guards on any thread.
  std::atomic<bool> capturing_{false};
  std::mutex deferred_mu_;
  std::vector<void*> deferred_frees_;  // Free calls made during a capture
  size_t capture_first_op_ = 0;
  std::vector<OpRecord> captured_ops_;  // ops of the capture that just ended
  std::vector<Graph> graphs_;
  size_t graph_memory_bytes_ = 0;
};

}  // namespace cuda_detail
}  // namespace saturn
