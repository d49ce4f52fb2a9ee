// CpuBackend: memory (aligned host allocations), upload/download (memcpy, f32 -> bf16/f16
// conversion for weights), host-clock op timing and dispatch to the op files (ops.h) with the
// kernel level and GEMM planner it was created with.
// Every op has finished when its call returns, so Synchronize is a no-op.
#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/clock.h"
#include "kernels/cpu/gemm/gemm_planner.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/stream_memory.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/half_float.h"
#include "kernels/quant_blocks.h"

namespace saturn {
namespace {

constexpr int64_t kMaxPollUs = 100000;  // 0.1 s: past any gap between ops

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown CPU";
}

// " +amx" where the AMX GEMMs run for these weights; where the CPU has AMX but this process
// may not use it, why not (so a user sees it in the server's ready line and GetServerInfo).
std::string AmxNote(cpu::Isa isa, DType weight_dtype) {
  if (cpu::AmxRuns(isa, weight_dtype)) return " +amx";
  const cpu::CpuFeatures& f = cpu::DetectCpuFeatures();
  if (f.amx_bf16 && !f.amx_usable) return absl::StrCat(" (amx unusable: ", f.amx_note, ")");
  return "";
}

// ", bf16 products by ..." where bf16 weights meet the AVX512-BF16 dot-product kernel: which
// of its two forms this CPU measured faster (isa_kernels.h: Bf16DotForm).
std::string Bf16DotNote(cpu::Isa isa, DType weight_dtype) {
  if (weight_dtype != DType::kBF16 || isa != cpu::Isa::kAvx512 ||
      !cpu::DetectCpuFeatures().avx512_bf16) {
    return "";
  }
  return absl::StrCat(", bf16 products by ", cpu::Bf16DotFormName(cpu::Bf16DotFormInUse()));
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int num_threads, DType weight_dtype, DType kv_dtype, cpu::Isa isa, int64_t poll_us,
             bool batch_invariant, bool packed_weights)
      : pool_(num_threads, poll_us),
        kernels_(cpu::KernelsFor(isa)),
        weight_dtype_(weight_dtype),
        kv_dtype_(kv_dtype),
        packed_layout_(PackedLayout(packed_weights, isa, weight_dtype)),
        packed_weights_(packed_weights),
        isa_(isa),
        device_name_(absl::StrCat(
            CpuModelName(), " (", num_threads, " threads) ", cpu::IsaName(isa),
            AmxNote(isa, weight_dtype), ", ", DTypeName(weight_dtype), " weights",
            Bf16DotNote(isa, weight_dtype), batch_invariant ? "" : ", not batch-invariant")) {
    // bf16 in AMX tiles: no served GEMM takes the skinny stream. f32 in panels: a tied LM head
    // (the row-major embedding table) still does, every step.
    // q8_0 / q4_0: every GEMM takes the quantized kernel, which the planner does not choose.
    planner_.set_tuned_dtype(packed_layout_ == Layout::kAmxTiles || IsBlockQuantized(weight_dtype)
                                 ? std::nullopt
                                 : std::optional<DType>(weight_dtype));
    planner_.set_batch_invariant(batch_invariant);
  }

  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return device_name_; }
  DType compute_dtype() const override { return DType::kF32; }
  DType weight_dtype() const override { return weight_dtype_; }
  // bf16 weights keep a bf16 KV cache: half the bytes a decode step's attention reads.
  DType kv_cache_dtype() const override { return kv_dtype_; }
  bool batch_invariant() const override { return planner_.batch_invariant(); }
  // Block formats read as quantized panels where VNNI runs, whatever the weights' dtype (q4_0
  // weights' q8_0 LM head; calibration's q8_0 GEMM).
  Layout GemmWeightLayout(DType weight) const override {
    if (weight == weight_dtype_) return packed_layout_;
    if (IsBlockQuantized(weight)) return PackedLayout(packed_weights_, isa_, weight);
    return Layout::kRows;
  }
  size_t device_memory_bytes() const override {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * page_size : 0;
  }
  bool per_op_timing_is_cheap() const override { return true; }
  HostCompute host_compute() const override {
    return {pool_.num_threads(), cpu::LastLevelCacheBytes()};
  }
  std::vector<int> HostThreadIds() const override { return pool_.worker_thread_ids(); }
  std::string KernelPlan() const override {
    const std::string plan = planner_.Describe();
    if (!packed_ran_.load(std::memory_order_relaxed)) return plan;
    return absl::StrCat(DTypeName(weight_dtype_),
                        packed_layout_ == Layout::kAmxTiles
                            ? " weights in AMX tiles: every M=amx_tiles"
                        : packed_layout_ == Layout::kQuantPanels
                            ? " weights in quantized panels: every M=vnni (x as q8_0)"
                            : " weights in 32-row panels: every M=panels (the blocked order)",
                        plan.empty() ? "" : "; ", plan);
  }
  bool TuningOnServedSteps() const override { return planner_.Tuning(); }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    // Huge pages for buffers of 2 MiB or more: weights and the KV cache are streamed.
    void* p = cpu::AllocateStreamed(bytes);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cpu backend: could not allocate ", bytes, " bytes"));
    }
    return DeviceBuffer(this, p, bytes);
  }
  void Free(void* ptr) override { std::free(ptr); }

  absl::Status Upload(const void* host, const Tensor& dst) override {
    if (dst.bytes() == 0) return absl::OkStatus();
    if (host == nullptr || dst.data == nullptr) {
      return absl::InvalidArgumentError("upload: null host or device pointer");
    }
    std::memcpy(dst.data, host, dst.bytes());
    return absl::OkStatus();
  }

  absl::Status Zero(const Tensor& dst) override {
    if (dst.bytes() == 0) return absl::OkStatus();
    if (dst.data == nullptr) return absl::InvalidArgumentError("zero: null device pointer");
    return cpu::Zero(pool_, dst);  // on the pool's threads: each first-touches its share
  }

  absl::Status UploadF32(const float* host, const Tensor& dst) override {
    const int64_t n = dst.numel();
    if (n == 0) return absl::OkStatus();
    if (host == nullptr || dst.data == nullptr) {
      return absl::InvalidArgumentError("upload_f32: null host or device pointer");
    }
    if (dst.layout != Layout::kRows && GemmWeightLayout(dst.dtype) != dst.layout) {
      return absl::InvalidArgumentError(absl::StrCat("upload_f32: dst is ", dst.ShapeString(),
                                                     ", which this backend does not use for ",
                                                     DTypeName(dst.dtype), " weights"));
    }
    if (IsBlockQuantized(dst.dtype)) {  // llama.cpp's blocks, its rounding (quant_blocks.h)
      if (dst.cols % DTypeBlockElems(dst.dtype) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("upload_f32: dst is ", dst.ShapeString(), "; ", DTypeName(dst.dtype),
                         " rows hold whole blocks of ", DTypeBlockElems(dst.dtype), " weights"));
      }
      const size_t row_bytes = DTypeRowBytes(dst.dtype, dst.cols);
      const bool panels = dst.layout == Layout::kQuantPanels;
      // Rows: 16 at a time in place. Panels: 32 rows quantized into scratch, then packed.
      // QuantizeRows cannot fail here: a block type and whole blocks, checked above.
      const int64_t unit = panels ? kPanelRows : 16;
      const int64_t units = (dst.rows + unit - 1) / unit;
      pool_.ParallelFor(units, 1, [&](int64_t ub, int64_t ue) {
        std::vector<uint8_t> scratch(panels ? kPanelRows * row_bytes : 0);
        for (int64_t u = ub; u < ue; ++u) {
          const int64_t r0 = u * unit, rows = std::min(unit, dst.rows - r0);
          uint8_t* to = static_cast<uint8_t*>(dst.data) + r0 * row_bytes;
          (void)QuantizeRows(dst.dtype, host + r0 * dst.cols, rows, dst.cols,
                             panels ? scratch.data() : to);
          if (panels) cpu::PackQuantPanels(dst.dtype, scratch.data(), rows, dst.cols, 0, 1, to);
        }
      });
      return absl::OkStatus();
    }
    if (dst.layout != Layout::kRows) {
      const int64_t panels = PanelPadded(dst.rows) / kPanelRows;
      pool_.ParallelFor(panels, 1, [&](int64_t b, int64_t e) {
        if (dst.layout == Layout::kAmxTiles) {
          cpu::PackAmxTiles(host, dst.rows, dst.cols, b, e, dst.as<uint16_t>());
        } else {
          cpu::PackPanels(host, dst.rows, dst.cols, b, e, dst.as<float>());
        }
      });
      return absl::OkStatus();
    }
    switch (dst.dtype) {
      case DType::kF32:
        std::memcpy(dst.data, host, dst.bytes());
        return absl::OkStatus();
      case DType::kBF16:
        for (int64_t i = 0; i < n; ++i) dst.as<uint16_t>()[i] = F32ToBf16(host[i]);
        return absl::OkStatus();
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) dst.as<uint16_t>()[i] = F32ToF16(host[i]);
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError(absl::StrCat("upload_f32: destination dtype ",
                                                       DTypeName(dst.dtype),
                                                       " is not a floating-point type"));
    }
  }

  absl::Status Download(const Tensor& src, void* host) override {
    if (src.bytes() == 0) return absl::OkStatus();
    if (host == nullptr || src.data == nullptr) {
      return absl::InvalidArgumentError("download: null host or device pointer");
    }
    std::memcpy(host, src.data, src.bytes());
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

 protected:
  absl::Status DoEmbedding(const Tensor& ids, const Tensor& table, const Tensor& out) override {
    return cpu::Embedding(pool_, ids, table, out);
  }
  absl::Status DoGemm(const Tensor& x, const Tensor& w, const Tensor& out) override {
    NotePacked(w);
    return cpu::Gemm(pool_, kernels_, &planner_, x, w, out);
  }
  absl::Status DoGemmSplit(const Tensor& x, const Tensor& w,
                           absl::Span<const Tensor> outs) override {
    NotePacked(w);
    return cpu::GemmSplit(pool_, kernels_, &planner_, x, w, outs);
  }
  absl::Status DoRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                         const Tensor& out) override {
    return cpu::RmsNorm(pool_, x, weight, eps, out);
  }
  absl::Status DoAddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                            float eps, const Tensor& out) override {
    return cpu::AddRmsNorm(pool_, x, residual, weight, eps, out);
  }
  absl::Status DoRope(const Tensor& q, const Tensor& k, const Tensor& positions, int head_dim,
                      const RopeParams& rope) override {
    return cpu::Rope(pool_, q, k, positions, head_dim, rope);
  }
  absl::Status DoKvWrite(const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                         const Tensor& k_cache, const Tensor& v_cache) override {
    return cpu::KvWrite(pool_, k, v, slot_mapping, k_cache, v_cache);
  }
  absl::Status DoAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const AttentionBatch& batch, const AttentionShape& shape,
                           const Tensor& out) override {
    return cpu::Attention(pool_, kernels_, q, k_cache, v_cache, batch, shape, out,
                          planner_.batch_invariant());
  }
  absl::Status DoSwiGlu(const Tensor& gate_up, const Tensor& out) override {
    return cpu::SwiGlu(pool_, kernels_, gate_up, out);
  }
  absl::Status DoAdd(const Tensor& a, const Tensor& b, const Tensor& out) override {
    return cpu::Add(pool_, a, b, out);
  }
  absl::Status DoGatherRows(const Tensor& x, const Tensor& indices, const Tensor& out) override {
    return cpu::GatherRows(pool_, x, indices, out);
  }
  absl::Status DoSample(const Tensor& logits, const SamplingBatch& params,
                        const Tensor& tokens) override {
    return cpu::Sample(pool_, logits, params, tokens);
  }
  absl::Status DoCopy(const Tensor& src, const Tensor& dst) override {
    return cpu::Copy(pool_, src, dst);
  }

  // The op ran synchronously inside the call, so the host clock is its device interval.
  void MarkOpDeviceBegin(size_t index) override {
    ops_[index].device_begin_us = NowUs() - step_host_start_us_;
  }
  void MarkOpDeviceEnd(size_t index) override {
    ops_[index].device_end_us = NowUs() - step_host_start_us_;
  }
  absl::Status ResolveDeviceTimes(StepTiming* timing) override {
    timing->graph_replayed = false;
    return absl::OkStatus();
  }

 private:
  cpu::ThreadPool pool_;
  const cpu::IsaKernels& kernels_;
  cpu::GemmPlanner planner_;
  const DType weight_dtype_;
  const DType kv_dtype_;
  // The layout of GEMM weights of weight_dtype_ (GemmWeightLayout): packed where the CPU
  // backend has a kernel that reads them so, else rows.
  static Layout PackedLayout(bool packed, cpu::Isa isa, DType weight_dtype) {
    if (!packed) return Layout::kRows;
    if (cpu::AmxRuns(isa, weight_dtype)) return Layout::kAmxTiles;
    if (weight_dtype == DType::kF32 && isa == cpu::Isa::kAvx512) return Layout::kPanels;
    if (IsBlockQuantized(weight_dtype) && isa == cpu::Isa::kAvx512 &&
        cpu::DetectCpuFeatures().avx512_vnni) {
      return Layout::kQuantPanels;
    }
    return Layout::kRows;
  }
  const Layout packed_layout_;
  const bool packed_weights_;
  const cpu::Isa isa_;
  std::atomic<bool> packed_ran_{false};  // a GEMM has read packed weights (KernelPlan)
  void NotePacked(const Tensor& w) {
    if (w.layout != Layout::kRows) packed_ran_.store(true, std::memory_order_relaxed);
  }
  const std::string device_name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options) {
  int num_threads = options.num_threads;
  if (num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu backend: num_threads must be >= 0 (0: all cores), got ", num_threads));
  }
  if (num_threads == 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (num_threads <= 0) num_threads = 1;
  DType weight_dtype = DType::kF32;
  if (options.weight_dtype == "bf16" || (options.weight_dtype == "auto" && cpu::HasNativeBf16())) {
    weight_dtype = DType::kBF16;
  } else if (options.weight_dtype == "q8_0" || options.weight_dtype == "q4_0") {
    weight_dtype = options.weight_dtype == "q8_0" ? DType::kQ8_0 : DType::kQ4_0;
  } else if (options.weight_dtype != "f32" && options.weight_dtype != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("dtype: unknown value \"", options.weight_dtype,
                                                   "\" (expected auto, f32, bf16, q8_0 or q4_0)"));
  }
  // Quantized weights keep a 16-bit cache where the CPU computes bf16 natively, as llama.cpp
  // keeps f16 beside its quantized weights; f32 elsewhere.
  DType kv_dtype = !IsBlockQuantized(weight_dtype) ? weight_dtype
                   : cpu::HasNativeBf16()          ? DType::kBF16
                                                   : DType::kF32;
  if (options.kv_cache_dtype == "f32" || options.kv_cache_dtype == "bf16") {
    kv_dtype = options.kv_cache_dtype == "f32" ? DType::kF32 : DType::kBF16;
  } else if (options.kv_cache_dtype != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_dtype: unknown value \"",
                                                   options.kv_cache_dtype,
                                                   "\" (expected auto, f32 or bf16)"));
  }
  const cpu::Isa isa = options.isa.value_or(cpu::BestIsa());
  if (!cpu::IsaSupported(isa)) {
    return absl::InvalidArgumentError(absl::StrCat("isa: this CPU cannot run ", cpu::IsaName(isa),
                                                   " kernels (best: ", cpu::IsaName(cpu::BestIsa()),
                                                   ")"));
  }
  int64_t poll_us = cpu::ThreadPool::kDefaultSpinUs;
  std::string poll_source = "poll_us";
  if (options.poll_us.has_value()) {
    poll_us = *options.poll_us;
  } else if (const char* env = std::getenv("SATURN_CPU_POLL_US"); env != nullptr) {
    poll_source = "SATURN_CPU_POLL_US";
    if (!absl::SimpleAtoi(env, &poll_us)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SATURN_CPU_POLL_US: \"", env, "\" is not an integer (microseconds, 0 to 100000)"));
    }
  }
  if (poll_us < 0 || poll_us > kMaxPollUs) {
    return absl::InvalidArgumentError(absl::StrCat(poll_source, ": must be in [0, ", kMaxPollUs,
                                                   "] microseconds, got ", poll_us));
  }
  bool packed = true;
  if (options.packed_weights.has_value()) {
    packed = *options.packed_weights;
  } else if (const char* env = std::getenv("SATURN_CPU_PACKED_WEIGHTS"); env != nullptr) {
    const std::string v = env;
    if (v != "0" && v != "1") {
      return absl::InvalidArgumentError(
          absl::StrCat("SATURN_CPU_PACKED_WEIGHTS: \"", v, "\" (expected 0 or 1)"));
    }
    packed = v == "1";
  }
  openblas_set_num_threads(num_threads);
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(
      num_threads, weight_dtype, kv_dtype, isa, poll_us, options.batch_invariant, packed));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int num_threads) {
  CpuBackendOptions o;
  o.num_threads = num_threads;
  o.weight_dtype = "f32";
  return CreateCpuBackend(o);
}

}  // namespace saturn
