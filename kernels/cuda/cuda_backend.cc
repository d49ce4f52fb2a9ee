// CudaBackend's set-up, memory and the factory (cuda_backend_impl.h holds the class and why it
// is built so).
#include "kernels/cuda/cuda_backend_impl.h"

namespace saturn {
namespace cuda_detail {

absl::Status CudaBackend::Init() {
  CUDA_CHECK(UseDevice(device_));
  CUDA_CHECK(cudaFree(nullptr));  // creates the context: fails here if the device is unusable
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // A fixed workspace keeps cuBLAS from allocating, which graph capture forbids.
  CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
  if (fused_kernels_) {
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

}  // namespace cuda_detail

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device, bool batch_invariant,
                                                           bool fused_kernels) {
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
  auto backend =
      std::make_unique<cuda_detail::CudaBackend>(device, prop, batch_invariant, fused_kernels);
  absl::Status s = backend->Init();
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " is unusable: ", s.message()));
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace saturn
