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
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/clock.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernel_plan.h"
#include "kernels/cuda/ops.h"
#include "kernels/op_record.h"
#include "kernels/status_macros.h"

namespace saturn {
namespace {

constexpr size_t kCublasWorkspaceBytes = 32u << 20;  // Hopper's recommended size
constexpr size_t kStagingFloats = 8u << 20;          // 32 MiB f32 staging for UploadF32

// cudaSetDevice for the calling thread, skipped when this thread already made `device`
// current through here (every device switch in the CUDA backend goes through this).
cudaError_t UseDevice(int device) {
  thread_local int current = -1;
  if (current == device) return cudaSuccess;
  const cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) current = device;
  return e;
}

absl::Status RefuseDuringCapture(bool capturing, const char* what) {
  if (!capturing) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   " during CUDA graph capture (it would invalidate the capture; the runner "
                   "uploads and allocates before BeginGraphCapture)"));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const cudaDeviceProp& prop, bool batch_invariant, bool kernels_v2)
      : device_(device),
        prop_(prop),
        batch_invariant_(batch_invariant),
        kernels_v2_(kernels_v2 && !batch_invariant) {}
  ~CudaBackend() override;
  absl::Status Init();

  std::string name() const override { return "cuda"; }
  std::string device_name() const override {
    return kernels_v2_ ? absl::StrCat(prop_.name, " (kernels v2)") : std::string(prop_.name);
  }
  DType compute_dtype() const override { return DType::kBF16; }
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
  // GPU clocks idle low (an H200 at 540 MHz, 1980 MHz under load: the first H200 run's
  // calibration saw its first GEMM trials 14 % slow while they ramped).
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
    if (kernels_v2_ && gpu::GemmSkinnyApplies(x, w, outs)) {
      return gpu::GemmSkinny(stream_, prop_.multiProcessorCount, x, w, outs);
    }
    return gpu::Gemm(cublas_, x, w, out);
  }
  // v2 at few rows: the fused projection's parts in one skinny launch (v1: one GEMM a part).
  absl::Status DoGemmSplit(const Tensor& x, const Tensor& w,
                           absl::Span<const Tensor> outs) override {
    if (kernels_v2_ && gpu::GemmSkinnyApplies(x, w, outs)) {
      OpScope op(this, OpKind::kGemm);
      return gpu::GemmSkinny(stream_, prop_.multiProcessorCount, x, w, outs);
    }
    return Backend::DoGemmSplit(x, w, outs);
  }
  // v2 at few rows: SwiGLU in the skinny GEMM's epilogue (v1: a GEMM, then swiglu.cu).
  bool FusesGemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& act) const override {
    return kernels_v2_ && gpu::GemmSkinnySwiGluApplies(x, w, act);
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
  bool FusesRopeKvWrite() const override { return kernels_v2_; }
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
    if (decode && kernels_v2_ && gpu::AttentionDecodeSplitApplies(shape)) {
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
    if (kernels_v2_) {
      return gpu::SampleSplit(stream_, prop_.multiProcessorCount, logits, params, tokens,
                              sample_workspace_);
    }
    return gpu::Sample(stream_, logits, params, tokens);
  }
  absl::Status DoCopy(const Tensor& src, const Tensor& dst) override {
    OpScope op(this, OpKind::kCopy);
    return gpu::Copy(stream_, src, dst);
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
  // --cuda_kernels=v2: gemm_skinny.cu (with its SwiGLU epilogue), attention_decode_split.cu,
  // rope_kv_write.cu.
  bool kernels_v2_ = false;
  float* split_workspace_ = nullptr;  // split attention's partials (v2), gpu::kSplitWorkspaceBytes
  gpu::GreedySplitWorkspace sample_workspace_;  // split greedy sampling's partials (v2)
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

absl::Status CudaBackend::Init() {
  CUDA_CHECK(UseDevice(device_));
  CUDA_CHECK(cudaFree(nullptr));  // creates the context: fails here if the device is unusable
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // A fixed workspace keeps cuBLAS from allocating, which graph capture forbids.
  CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
  if (kernels_v2_) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&split_workspace_), gpu::kSplitWorkspaceBytes));
    const size_t parts = size_t{gpu::kSampleMaxRows} * gpu::kSampleMaxSplits;
    const size_t bytes =
        parts * (sizeof(float) + sizeof(int)) + gpu::kSampleMaxRows * sizeof(unsigned);
    CUDA_CHECK(cudaMalloc(&sample_workspace_memory_, bytes));
    // The counters start at zero; on stream_, so every launch on it comes after.
    CUDA_CHECK(cudaMemsetAsync(sample_workspace_memory_, 0, bytes, stream_));
    char* base = static_cast<char*>(sample_workspace_memory_);
    sample_workspace_.values = reinterpret_cast<float*>(base);
    sample_workspace_.indices = reinterpret_cast<int*>(base + parts * sizeof(float));
    sample_workspace_.done =
        reinterpret_cast<unsigned*>(base + parts * (sizeof(float) + sizeof(int)));
  }
  CUDA_CHECK(cudaEventCreate(&step_start_event_));
  CUDA_CHECK(cudaEventCreate(&step_end_event_));
  CUDA_CHECK(cudaEventCreate(&first_op_event_));
  event_pool_.reserve(512);
  for (int i = 0; i < 256; ++i) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    event_pool_.push_back(e);
  }
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  (void)UseDevice(device_);
  if (capturing_) (void)AbortGraphCapture();
  FreeDeferred();
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  for (Graph& g : graphs_) {
    if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
    if (g.graph != nullptr) (void)cudaGraphDestroy(g.graph);
  }
  for (cudaEvent_t e : event_pool_) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : {step_start_event_, step_end_event_, first_op_event_}) {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (cublas_workspace_ != nullptr) (void)cudaFree(cublas_workspace_);
  if (split_workspace_ != nullptr) (void)cudaFree(split_workspace_);
  if (sample_workspace_memory_ != nullptr) (void)cudaFree(sample_workspace_memory_);
  if (staging_ != nullptr) (void)cudaFree(staging_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

absl::Status CudaBackend::UploadF32(const float* host, const Tensor& dst) {
  RETURN_IF_ERROR(RefuseDuringCapture(capturing_, "UploadF32"));
  if (dst.dtype == DType::kF32) return Upload(host, dst);
  if (dst.dtype != DType::kBF16) {
    return absl::UnimplementedError(
        absl::StrCat("UploadF32: target dtype ", DTypeName(dst.dtype), " on CUDA"));
  }
  CUDA_CHECK(UseDevice(device_));
  if (staging_ == nullptr)
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&staging_), kStagingFloats * sizeof(float)));
  const int64_t n = dst.numel();
  for (int64_t off = 0; off < n; off += static_cast<int64_t>(kStagingFloats)) {
    const int64_t count = std::min<int64_t>(n - off, static_cast<int64_t>(kStagingFloats));
    // Stream order keeps the next chunk's copy behind this chunk's conversion.
    CUDA_CHECK(cudaMemcpyAsync(staging_, host + off, count * sizeof(float), cudaMemcpyHostToDevice,
                               stream_));
    RETURN_IF_ERROR(
        gpu::ConvertF32ToBF16(stream_, staging_, static_cast<char*>(dst.data) + off * 2, count));
  }
  return absl::OkStatus();
}

void CudaBackend::BeginStep(bool per_op_device_times) {
  Backend::BeginStep(per_op_device_times);
  events_used_ = 0;
  op_events_.clear();
  first_op_recorded_ = false;
  step_end_recorded_ = false;
  graph_replayed_ = false;
  (void)UseDevice(device_);
  if (nvtx_step_open_) nvtxRangePop();
  nvtxRangePushA("step");
  nvtx_step_open_ = true;
  if (!capturing_) (void)cudaEventRecord(step_start_event_, stream_);
}

void CudaBackend::Free(void* ptr) {
  if (ptr == nullptr) return;
  if (capturing_) {  // cudaFree would invalidate the capture: free when it ends
    std::lock_guard<std::mutex> lock(deferred_mu_);
    deferred_frees_.push_back(ptr);
    return;
  }
  (void)UseDevice(device_);
  (void)cudaFree(ptr);
}

void CudaBackend::FreeDeferred() {
  std::vector<void*> ptrs;
  {
    std::lock_guard<std::mutex> lock(deferred_mu_);
    ptrs.swap(deferred_frees_);
  }
  for (void* p : ptrs) (void)cudaFree(p);
}

void CudaBackend::MarkStepEnd() {
  if (capturing_ || step_end_recorded_) return;
  step_end_recorded_ = cudaEventRecord(step_end_event_, stream_) == cudaSuccess;
}

cudaEvent_t CudaBackend::AcquireEvent() {
  if (events_used_ == event_pool_.size()) {
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) return nullptr;
    event_pool_.push_back(e);
  }
  return event_pool_[events_used_++];
}

void CudaBackend::MarkOp(size_t index, bool end) {
  // Events recorded inside a capture would become graph nodes timing nothing we resolve.
  if (capturing_) return;
  if (op_events_.size() <= index) op_events_.resize(index + 1, {nullptr, nullptr});
  cudaEvent_t e = AcquireEvent();
  if (e == nullptr || cudaEventRecord(e, stream_) != cudaSuccess) return;
  (end ? op_events_[index].second : op_events_[index].first) = e;
}

absl::StatusOr<double> CudaBackend::ElapsedUs(cudaEvent_t from, cudaEvent_t to) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return static_cast<double>(ms) * 1000.0;
}

absl::Status CudaBackend::ResolveDeviceTimes(StepTiming* timing) {
  if (capturing_) return absl::FailedPreconditionError("EndStep called during graph capture");
  if (nvtx_step_open_) {
    nvtxRangePop();
    nvtx_step_open_ = false;
  }
  // The runner marked the end right after the last op; other callers end here.
  if (!step_end_recorded_) CUDA_CHECK(cudaEventRecord(step_end_event_, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // device faults surface here
  timing->graph_replayed = graph_replayed_;
  if (per_op_device_times_) {
    for (size_t i = 0; i < ops_.size() && i < op_events_.size(); ++i) {
      const auto [b, e] = op_events_[i];
      if (b == nullptr || e == nullptr) continue;
      auto begin = ElapsedUs(step_start_event_, b);
      auto finish = ElapsedUs(step_start_event_, e);
      if (!begin.ok()) return begin.status();
      if (!finish.ok()) return finish.status();
      ops_[i].device_begin_us = *begin;
      ops_[i].device_end_us = *finish;
    }
    // A replayed graph has no per-op intervals: report the step span instead.
    if (graph_replayed_) per_op_device_times_ = false;
  }
  if (!per_op_device_times_) {
    double span = 0;
    if (first_op_recorded_) {
      auto s = ElapsedUs(first_op_event_, step_end_event_);
      if (!s.ok()) return s.status();
      span = *s;
    }
    // Without per-op intervals the span is the best bound on busy time (one stream, ops
    // issued back to back; host gaps inside the step count as busy).
    timing->device_span_us = span;
    timing->device_busy_us = span;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::BeginGraphCapture() {
  if (capturing_) return absl::FailedPreconditionError("graph capture already in progress");
  CUDA_CHECK(UseDevice(device_));
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  capture_first_op_ = ops_.size();
  return absl::OkStatus();
}

absl::StatusOr<cudaGraph_t> CudaBackend::FinishCapture() {
  if (!capturing_) return absl::FailedPreconditionError("no graph capture in progress");
  capturing_ = false;
  if (capture_first_op_ < ops_.size()) {
    captured_ops_.assign(ops_.begin() + static_cast<std::ptrdiff_t>(capture_first_op_), ops_.end());
  } else {
    captured_ops_.clear();
  }
  ops_.resize(std::min(capture_first_op_, ops_.size()));  // captured, not run
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  FreeDeferred();
  if (e != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // clear it, so the next launch check does not report it
    CUDA_CHECK(e);
  }
  return graph;
}

absl::Status CudaBackend::AbortGraphCapture() {
  CUDA_CHECK(UseDevice(device_));
  absl::StatusOr<cudaGraph_t> graph = FinishCapture();
  if (!graph.ok()) return graph.status();
  if (*graph != nullptr) CUDA_CHECK(cudaGraphDestroy(*graph));
  captured_ops_.clear();
  return absl::OkStatus();
}

absl::StatusOr<int> CudaBackend::EndGraphCapture() {
  if (!capturing_)
    return absl::FailedPreconditionError("EndGraphCapture without BeginGraphCapture");
  CUDA_CHECK(UseDevice(device_));
  Graph g;
  ASSIGN_OR_RETURN(g.graph, FinishCapture());
  g.ops = std::move(captured_ops_);
  captured_ops_.clear();
  size_t free_before = 0, free_after = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  const cudaError_t inst = cudaGraphInstantiate(&g.exec, g.graph, 0);
  if (inst == cudaSuccess) {
    const cudaError_t up = cudaGraphUpload(g.exec, stream_);
    if (up == cudaSuccess) (void)cudaStreamSynchronize(stream_);
    if (up != cudaSuccess) {
      (void)cudaGraphExecDestroy(g.exec);
      (void)cudaGraphDestroy(g.graph);
      CUDA_CHECK(up);
    }
  } else {
    (void)cudaGraphDestroy(g.graph);
    CUDA_CHECK(inst);
  }
  CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  g.memory_bytes = free_before > free_after ? free_before - free_after : 0;
  graph_memory_bytes_ += g.memory_bytes;
  graphs_.push_back(std::move(g));
  return static_cast<int>(graphs_.size() - 1);
}

absl::Status CudaBackend::ReplayGraph(int handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= graphs_.size() ||
      graphs_[static_cast<size_t>(handle)].exec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("ReplayGraph: unknown handle ", handle));
  }
  if (capturing_) return absl::FailedPreconditionError("ReplayGraph during graph capture");
  CUDA_CHECK(UseDevice(device_));
  const Graph& g = graphs_[static_cast<size_t>(handle)];
  const double begin = NowUs() - step_host_start_us_;
  nvtxRangePushA("graph_replay");
  if (!first_op_recorded_) {
    first_op_recorded_ = cudaEventRecord(first_op_event_, stream_) == cudaSuccess;
  }
  const cudaError_t e = cudaGraphLaunch(g.exec, stream_);
  nvtxRangePop();
  CUDA_CHECK(e);
  AppendReplayedOps(g.ops, begin, NowUs() - step_host_start_us_);
  graph_replayed_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::ReleaseGraph(int handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= graphs_.size() ||
      graphs_[static_cast<size_t>(handle)].exec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("ReleaseGraph: unknown handle ", handle));
  }
  CUDA_CHECK(UseDevice(device_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // a replay in flight still uses it
  Graph& g = graphs_[static_cast<size_t>(handle)];
  (void)cudaGraphExecDestroy(g.exec);
  (void)cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
  g.ops.clear();
  graph_memory_bytes_ -= std::min(graph_memory_bytes_, g.memory_bytes);
  return absl::OkStatus();
}

}  // namespace

// Memory: clock x 2 (DDR) x bus width. Compute: SMs x boost clock x dense bf16 tensor FLOPs
// per SM per clock of the architecture (NVIDIA architecture whitepapers: A100 312 TFLOP/s =
// 108 SMs x 1.41 GHz x 2048; H100/H200 SXM 989 TFLOP/s = 132 x 1.83 GHz x 4096).
SpecCeilings CudaBackend::spec_ceilings() const {
  SpecCeilings s;
  int mem_khz = 0, bus_bits = 0, sm_khz = 0;
  if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device_) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_) != cudaSuccess ||
      cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device_) != cudaSuccess) {
    (void)cudaGetLastError();
    return s;
  }
  s.bytes_per_s = 2.0 * mem_khz * 1e3 * bus_bits / 8.0;
  int per_sm_clk = 0;  // dense bf16 FLOPs per SM per clock
  if (prop_.major == 8 && prop_.minor == 0) per_sm_clk = 2048;
  if (prop_.major == 9) per_sm_clk = 4096;
  if (prop_.major == 10) per_sm_clk = 8192;
  s.flops_per_s = double(prop_.multiProcessorCount) * sm_khz * 1e3 * per_sm_clk;
  s.method = absl::StrCat("bandwidth = 2 x memory clock ", mem_khz / 1000, " MHz x ", bus_bits,
                          "-bit bus; compute = ", prop_.multiProcessorCount, " SMs x ",
                          sm_khz / 1000, " MHz x ", per_sm_clk,
                          per_sm_clk > 0 ? " dense bf16 FLOP/clk/SM (sm_" : " (unknown for sm_",
                          prop_.major, prop_.minor, ")");
  return s;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device, bool batch_invariant,
                                                           bool kernels_v2) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear, so later calls do not see it
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA driver or device: cudaGetDeviceCount: ", cudaGetErrorString(e)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device found");
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist (", count, " found)"));
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 8) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " (", prop.name, ") has compute capability ",
                     prop.major, ".", prop.minor, "; the CUDA backend needs 8.0 or newer (bf16)"));
  }
  auto backend = std::make_unique<CudaBackend>(device, prop, batch_invariant, kernels_v2);
  absl::Status s = backend->Init();
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " is unusable: ", s.message()));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace saturn
