// The backend interface: every op the model needs, issued in order on one stream over
// device-owned buffers. The CPU backend (kernels/cpu/) and the CUDA backend (kernels/cuda/)
// implement the Do* virtuals; this base class checks shapes, attributes FLOPs and bytes from
// the shapes (kernels/op_cost.h) and records one OpRecord per op for the diagnostics.
//
// Rules every implementation keeps:
//  - Ops only enqueue work. Nothing in an op waits for the device or copies to the host;
//    Download() and Synchronize() are the only host round trips.
//  - Launch configuration depends only on shapes and on the host-side bounds in
//    AttentionBatch, never on device data, so a decode step can be captured as a graph.
//  - Errors are returned as absl::Status (shape errors at once, device faults at the next
//    Synchronize/Download). Nothing aborts the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/comm/communicator.h"
#include "kernels/op_record.h"
#include "kernels/rope_params.h"
#include "kernels/tensor.h"

namespace saturn {

class Backend;

// Owns one device allocation. Move-only; frees on destruction through its backend.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* ptr, size_t bytes) : owner_(owner), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void Reset();
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  // A 2-D view of this buffer starting at byte `offset`. The caller keeps it in bounds.
  Tensor View(DType dtype, int64_t rows, int64_t cols, size_t offset = 0) const {
    return Tensor{static_cast<char*>(ptr_) + offset, dtype, rows, cols};
  }

 private:
  Backend* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Paged attention over a ragged batch. Sequence s owns query rows
// [query_start[s], query_start[s+1]) of q; its context (cached tokens, including the ones
// written by this step's KvWrite) has context_lens[s] tokens, the last query row being the
// last context position (causal: query row i of a chunk of length L attends to positions
// 0 .. context_len - L + i). Block b of a sequence lives in cache rows
// [block_tables[s][b] * block_size, +block_size).
struct AttentionBatch {
  Tensor query_start;   // i32 [1, num_seqs + 1], device
  Tensor context_lens;  // i32 [1, num_seqs], device
  Tensor block_tables;  // i32 [num_seqs, max_blocks_per_seq], device
  int num_seqs = 0;
  int max_query_len = 0;       // host-known upper bound on any query chunk length
  int max_context_len = 0;     // host-known upper bound on any context length
  int64_t attended_pairs = 0;  // sum over query rows of positions attended (cost model only)
  int64_t context_tokens = 0;  // sum over sequences of context_lens (cost model only)
  // Host [num_seqs]: nonzero where the sequence's rows are known tokens (prompt, or recompute
  // after preemption) rather than one decode row; null where unknown.
  const uint8_t* prefill = nullptr;
  // Host [num_seqs]: the position where the sequence's generated tokens begin (its prompt
  // length); null where unknown (then a prefill sequence's rows all count as prompt rows). A
  // batch-invariant CPU backend computes the rows before it (prompt rows) in one arithmetic
  // whatever their chunking, and the rows from it on (decode rows, and the same positions
  // recomputed after a preemption) in the decode step's, so a request's bits do not depend on
  // whether it was preempted.
  const int32_t* decode_from = nullptr;
};

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  float scale = 1.0f;
};

// Per-row sampling parameters, device-resident. temperature <= 0 means greedy; top_k <= 0
// means off; top_p >= 1 means off. The random draw for a row is
// SampleUniform(seed, step) (kernels/sampling_rng.h), so the same seed gives the same
// tokens on every backend.
struct SamplingBatch {
  Tensor temperature;  // f32 [1, B]
  Tensor top_k;        // i32 [1, B]
  Tensor top_p;        // f32 [1, B]
  Tensor seed;         // i64 [1, B]
  Tensor step;         // i32 [1, B]: index of the token being generated for that request
};

// Measured at the end of a step: what the device did, per op.
struct StepTiming {
  std::vector<OpRecord> ops;         // in issue order
  double issue_us = 0;               // host time spent inside op calls
  double device_busy_us = 0;         // union of op device intervals
  double device_span_us = 0;         // first op device start .. last op device end
  bool per_op_device_times = false;  // false: only the step span was timed
  bool graph_replayed = false;
  int replayed_ops = 0;  // of `ops`, those a graph replay issued (one launch for all of them)
};

// Datasheet-style ceilings computed from the device's own properties (calibration reports
// them beside the measured ones); zeros where the backend cannot say.
struct SpecCeilings {
  double flops_per_s = 0;  // peak dense tensor FLOP/s in the compute dtype
  double bytes_per_s = 0;  // peak memory bandwidth
  std::string method;      // how each was computed
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;         // "cpu" or "cuda"
  virtual std::string device_name() const = 0;  // e.g. "AMD EPYC (2 threads)", "NVIDIA H200"
  // Precision of activations on this backend, and of weights and the KV cache unless the
  // two below say otherwise.
  virtual DType compute_dtype() const = 0;
  // Precision of the GEMM weight matrices where it differs from compute_dtype() (the CPU
  // backend's bf16 weights with f32 activations); norms and the embedding table stay in
  // compute_dtype().
  virtual DType weight_dtype() const { return compute_dtype(); }
  // Precision of the KV cache where it differs from compute_dtype() (the CPU backend keeps
  // K and V in bf16 beside bf16 weights, as a bf16 model's cache is on other engines).
  virtual DType kv_cache_dtype() const { return compute_dtype(); }
  // A row's results do not depend on the batch, the chunking or what else shares the step
  // (--batch_invariant; CreateBackend below).
  virtual bool batch_invariant() const { return false; }
  // The layout a GEMM weight matrix of this dtype is uploaded in (tensor.h: Layout): kRows, or
  // the backend's own, which only its GEMMs read (the CPU backend's AMX tiles for bf16 weights
  // where AMX runs). UploadF32 writes that layout.
  virtual Layout GemmWeightLayout(DType /*weight*/) const { return Layout::kRows; }
  virtual size_t device_memory_bytes() const = 0;  // total memory the backend may use
  // How long calibration keeps the device busy before its timed trials, so that clocks that
  // idle low (a GPU's, from hundreds of MHz) have ramped up: 0 where they need no ramp.
  virtual double clock_warmup_s() const { return 0; }
  // One-op dispatch cost is measured by the calibrator; this says whether per-op device
  // timing perturbs the device enough that it should be sampled rather than always on.
  virtual bool per_op_timing_is_cheap() const = 0;
  virtual SpecCeilings spec_ceilings() const { return {}; }
  // Where the backend computes on the host's cores (the CPU backend): the threads its ops run
  // on and the last-level cache that holds its data, which calibration sizes its trials by and
  // corrects for other processes with. {0, 0} where a device computes.
  struct HostCompute {
    int threads = 0;
    size_t cache_bytes = 0;
  };
  virtual HostCompute host_compute() const { return {}; }
  // Device telemetry: the share of recent time the device ran any kernel, in [0, 1] (what
  // nvidia-smi calls utilization), or -1 where the backend has no such counter (the CPU) or
  // it cannot be read now (no NVML). Any thread.
  virtual double DeviceUtilization() const { return -1; }
  // Kernel ids of the threads besides the caller that run this backend's ops (the CPU pool's
  // workers; none on CUDA, whose ops run on the device), so the engine can count the time
  // they waited for a core (step_record.h: sched_wait_us). 0 for one not started yet.
  virtual std::vector<int> HostThreadIds() const { return {}; }
  // Which kernel each GEMM shape runs, as this backend chose it by measurement (CPU: the GEMM
  // planner's paths per input-row count, e.g. "k768/bf16: ... 1=skinny 8=amx_stream ...
  // more=amx"); empty where the backend does not choose, or before its first GEMM.
  virtual std::string KernelPlan() const { return ""; }
  // True while the backend is still settling a kernel setting on the steps it serves (CPU: the
  // M = 1 weight stream's prefetch distance, kernels/cpu/gemm/stream_tuner.h), so steps may differ
  // in speed; the engine's warm-up decodes until it is false (or a cap).
  virtual bool TuningOnServedSteps() const { return false; }

  // --- memory ---------------------------------------------------------------------------
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Copies host bytes into dst (same dtype, dst.bytes() bytes). The host memory must stay
  // valid until the next Synchronize()/Download().
  virtual absl::Status Upload(const void* host, const Tensor& dst) = 0;
  // Host memory for staging step inputs and results: page-locked on CUDA (one DMA, no driver
  // bounce copy), 64-byte aligned ordinary memory elsewhere. Released with FreeHost.
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes);
  virtual void FreeHost(void* ptr);
  // Sets dst's bytes to zero, committing its memory (setup, not a step's op): a CPU
  // allocation is otherwise mapped on first touch, so reads of never-written memory hit one
  // shared zero page in cache and run far faster than reads of real data would.
  virtual absl::Status Zero(const Tensor& dst) = 0;
  // Converts host f32 values to dst.dtype and copies them (used for weights).
  virtual absl::Status UploadF32(const float* host, const Tensor& dst) = 0;
  // Waits for all issued work, then copies src into host memory.
  virtual absl::Status Download(const Tensor& src, void* host) = 0;
  // Queues the copy of src into host memory behind the issued work and returns without
  // waiting: the bytes are there once the next EndStep()/Synchronize()/Download() returns, and
  // the host memory must not be read or reused before that. Where ops run as they are issued
  // (RunsAsync() false) it copies at once.
  virtual absl::Status DownloadAsync(const Tensor& src, void* host) { return Download(src, host); }
  virtual absl::Status Synchronize() = 0;
  // Whether issued ops may still be running when the call that issued them returns (CUDA's
  // stream), so the host can work while the device does (the engine's overlapped loop).
  virtual bool RunsAsync() const { return false; }

  // --- ops (shapes checked here, work done by Do*) ----------------------------------------
  // out[T, D] = table[ids[t], :]; the table row-major, or in GemmWeightLayout(its dtype) (the
  // engine shares a tied LM head's matrix with the GEMM; the CPU reads f32 panels).
  absl::Status Embedding(const Tensor& ids, const Tensor& table, const Tensor& out);
  // out[M, N] = x[M, K] * w[N, K]^T   (w in the HF [out_features, in_features] layout)
  absl::Status Gemm(const Tensor& x, const Tensor& w, const Tensor& out);
  // One GEMM of x against w whose output columns go to `outs` in order: outs[i] is
  // [M, N_i], the N_i sum to w's rows (the fused q/k/v projection into separate q, k and v;
  // one op where the backend runs it as one, as the CPU backend does).
  absl::Status GemmSplit(const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs);
  // out = x / rms(x) * weight, row-wise
  absl::Status RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
  // residual += x; out = rmsnorm(residual) * weight   (fused residual add + norm)
  absl::Status AddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                          const Tensor& out);
  // Rotary embedding in place on q [T, Hq*hd] and k [T, Hkv*hd] (rotate-half / NeoX pairing,
  // as Hugging Face Llama), positions i32 [1, T]; frequencies from `rope` (rope_params.h).
  absl::Status Rope(const Tensor& q, const Tensor& k, const Tensor& positions, int head_dim,
                    const RopeParams& rope);
  // k_cache[slot[t], :] = k[t, :], same for v. slot i32 [1, T]; caches [rows, Hkv*hd] in
  // kv_cache_dtype() (rounded where it is narrower than k and v).
  absl::Status KvWrite(const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                       const Tensor& k_cache, const Tensor& v_cache);
  // Rope on q and k, then k and v into the cache: one op ("rope_kv_write") where the backend
  // fuses them (FusesRopeKvWrite), q rotated in place and k's rotated rows written only to
  // k_cache (k is scratch afterwards, rotated or not); elsewhere Rope then KvWrite, two ops.
  absl::Status RopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& positions, int head_dim, const RopeParams& rope,
                           const Tensor& slot_mapping, const Tensor& k_cache,
                           const Tensor& v_cache);
  // Whether RopeKvWrite runs as one fused op (CUDA --cuda_kernels=fused).
  virtual bool FusesRopeKvWrite() const { return false; }
  // out[T, Hq*hd] = softmax(q k^T * scale) v over the paged cache (see AttentionBatch).
  absl::Status Attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionBatch& batch, const AttentionShape& shape,
                         const Tensor& out);
  // out[T, F] = silu(gate_up[:, :F]) * gate_up[:, F:]
  absl::Status SwiGlu(const Tensor& gate_up, const Tensor& out);
  // act = SwiGlu(x w^T), through gate_up [M, w.rows] (gate rows of w first): one op
  // ("gemm_swiglu", a GEMM by class) where the backend fuses them for these shapes
  // (FusesGemmSwiGlu), and gate_up is then not written; elsewhere Gemm then SwiGlu, two ops.
  absl::Status GemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                          const Tensor& act);
  // Whether GemmSwiGlu runs as one fused op for these operands (CUDA --cuda_kernels=fused at the
  // skinny GEMM's 1-16 rows).
  virtual bool FusesGemmSwiGlu(const Tensor& /*x*/, const Tensor& /*w*/,
                               const Tensor& /*act*/) const {
    return false;
  }
  // out = a + b (elementwise, same shape)
  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out);
  // out[i, :] = x[indices[i], :]   indices i32 [1, R]
  absl::Status GatherRows(const Tensor& x, const Tensor& indices, const Tensor& out);
  // tokens i32 [1, B] drawn from logits f32 [B, V] (logits may be overwritten as scratch).
  // Row semantics, identical on every backend: temperature <= 0 -> argmax (lowest index on
  // ties; NaN logits never win, a row of NaNs gives 0). Otherwise z = logits / temperature; if
  // top_k > 0 keep the top_k largest z (lower index wins ties); p = softmax over the kept; sort
  // kept by p descending (lower index on ties); if top_p < 1 keep the shortest prefix whose mass
  // reaches top_p (at least one); u = SampleUniform(seed, step) * kept mass; return the first token
  // whose cumulative mass exceeds u. At a temperature the CPU takes a NaN z as -inf (never
  // drawn); the CUDA sampler does not define NaN rows there yet.
  absl::Status Sample(const Tensor& logits, const SamplingBatch& params, const Tensor& tokens);
  // dst = src (same dtype and size); used by calibration to measure bandwidth
  absl::Status Copy(const Tensor& src, const Tensor& dst);
  // x summed in place over the tensor-parallel group set by SetCommunicator (the partial
  // outputs of a layer sharded by rows: o_proj, down_proj). A collective: every rank issues it
  // at the same point of the step. FAILED_PRECONDITION without a group.
  absl::Status AllReduce(const Tensor& x);
  // Rank r's `part` [R, counts[r]] (row-major f32) placed at columns [sum of counts before r, +
  // counts[r]) of `whole` [R, sum of counts] on rank 0 (whole is unused on other ranks). A
  // collective: the vocabulary-parallel LM head's logits.
  absl::Status GatherColumns(const Tensor& part, const std::vector<int64_t>& counts,
                             const Tensor& whole);

  // --- tensor parallelism -------------------------------------------------------------------
  // The group AllReduce sums over (not owned; null: none). Set before the first step.
  void SetCommunicator(Communicator* comm) { comm_ = comm; }
  Communicator* communicator() const { return comm_; }

  // --- instrumentation --------------------------------------------------------------------
  // Starts a step: clears the op list. per_op_device_times asks for each op's device
  // interval (always true on the CPU backend, sampled on CUDA where it perturbs).
  virtual void BeginStep(bool per_op_device_times);
  // Marks the end of the step's device work: called after the last op, before the Download
  // of its results, so the copy back and the host's wake-up stay out of the step's span
  // (CUDA records its step-end event here; EndStep records it when no mark was made).
  virtual void MarkStepEnd() {}
  // Waits for the step's work and returns its timings.
  virtual absl::StatusOr<StepTiming> EndStep();

  // --- CUDA graphs (backends without them return FAILED_PRECONDITION) ---------------------
  virtual bool SupportsGraphs() const { return false; }
  // Between Begin and End, ops are recorded into a graph instead of run.
  virtual absl::Status BeginGraphCapture();
  // Returns a handle for ReplayGraph.
  virtual absl::StatusOr<int> EndGraphCapture();
  // Ends a capture whose ops failed: the partial graph is destroyed, never instantiated.
  virtual absl::Status AbortGraphCapture();
  virtual absl::Status ReplayGraph(int handle);
  // Frees a captured graph; its handle is invalid from then on.
  virtual absl::Status ReleaseGraph(int handle);
  virtual size_t graph_memory_bytes() const { return 0; }

  // Called by DeviceBuffer only.
  virtual void Free(void* ptr) = 0;

 protected:
  virtual absl::Status DoEmbedding(const Tensor& ids, const Tensor& table, const Tensor& out) = 0;
  virtual absl::Status DoGemm(const Tensor& x, const Tensor& w, const Tensor& out) = 0;
  // Default: one DoGemm per part, against w's matching row slice.
  virtual absl::Status DoGemmSplit(const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs);
  virtual absl::Status DoRmsNorm(const Tensor& x, const Tensor& weight, float eps,
                                 const Tensor& out) = 0;
  virtual absl::Status DoAddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                    float eps, const Tensor& out) = 0;
  virtual absl::Status DoRope(const Tensor& q, const Tensor& k, const Tensor& positions,
                              int head_dim, const RopeParams& rope) = 0;
  virtual absl::Status DoKvWrite(const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                                 const Tensor& k_cache, const Tensor& v_cache) = 0;
  // Called where FusesRopeKvWrite() says so; by default DoRope then DoKvWrite (a backend
  // that fuses them overrides it).
  virtual absl::Status DoRopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& positions, int head_dim, const RopeParams& rope,
                                     const Tensor& slot_mapping, const Tensor& k_cache,
                                     const Tensor& v_cache);
  virtual absl::Status DoAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                   const AttentionBatch& batch, const AttentionShape& shape,
                                   const Tensor& out) = 0;
  virtual absl::Status DoSwiGlu(const Tensor& gate_up, const Tensor& out) = 0;
  // Called where FusesGemmSwiGlu(x, w, act) says so; by default DoGemm into gate_up then
  // DoSwiGlu (a backend that fuses them overrides it, and need not write gate_up).
  virtual absl::Status DoGemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                                    const Tensor& act);
  virtual absl::Status DoAdd(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual absl::Status DoGatherRows(const Tensor& x, const Tensor& indices, const Tensor& out) = 0;
  virtual absl::Status DoSample(const Tensor& logits, const SamplingBatch& params,
                                const Tensor& tokens) = 0;
  virtual absl::Status DoCopy(const Tensor& src, const Tensor& dst) = 0;
  // Default: the communicator's sum over host memory (backends whose tensors live there).
  virtual absl::Status DoAllReduce(const Tensor& x);
  virtual absl::Status DoGatherColumns(const Tensor& part, const std::vector<int64_t>& counts,
                                       const Tensor& whole);

  // Device-side timing hooks around op `index` of the current step (ops_[index]).
  // CPU: host clock (the op ran synchronously). CUDA: events on the stream.
  virtual void MarkOpDeviceBegin(size_t index) = 0;
  virtual void MarkOpDeviceEnd(size_t index) = 0;
  // Fills device_begin_us/device_end_us of ops_ once the step's work is complete.
  virtual absl::Status ResolveDeviceTimes(StepTiming* timing) = 0;

  // Appends a replayed graph's ops to the step. The replay's host interval
  // [issue_begin_us, issue_end_us] goes to the first op only (the others get none), so the
  // step's issue_us counts the launch once, not once per captured op.
  void AppendReplayedOps(const std::vector<OpRecord>& ops, double issue_begin_us,
                         double issue_end_us);

  // Current step's ops, appended by the op wrappers.
  std::vector<OpRecord> ops_;
  bool per_op_device_times_ = true;
  Communicator* comm_ = nullptr;
  std::vector<float> gather_staging_;  // DoGatherColumns' rank-major receive buffer
  int replayed_ops_ = 0;               // this step's ops that came from AppendReplayedOps
  double step_host_start_us_ = 0;

 private:
  // Records the op, times its issue and device interval, forwards errors.
  template <typename Fn>
  absl::Status Run(OpKind kind, const OpCost& cost, Fn&& fn);
};

// Creates the backend named by `kind`: "cpu", "cuda" or "auto" (CUDA when a device is
// present, else CPU with one log line saying why). num_threads applies to the CPU backend
// (0: all cores). dtype is the weight precision: "auto" (the backend's default), or "f32" /
// "bf16" (the CPU backend; the CUDA backend accepts only its own compute dtype).
// kv_cache_dtype is the KV cache's: "auto" (the weights'), or "f32" / "bf16" (the CPU
// backend; the CUDA backend accepts only its own). batch_invariant: "auto" (on for the CPU
// backend, off for CUDA), "on" or "off"; on, a request's tokens and logprobs do not depend on
// what else shares its steps (CpuBackendOptions::batch_invariant; on CUDA, "on" takes
// fixed-order GEMM and attention kernels, CreateCudaBackend). cuda_kernels: "baseline" or
// "fused", with "v1" and "v2" as their aliases (CreateCudaBackend's fused_kernels; the CPU
// backend ignores it).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const std::string& kind, int num_threads = 0, const std::string& dtype = "auto",
    const std::string& kv_cache_dtype = "auto", const std::string& batch_invariant = "auto",
    const std::string& cuda_kernels = "baseline");

}  // namespace saturn
