// A backend that captures like CUDA does, on top of the CPU backend, for host tests of what
// the CUDA backend relies on: ops issued during a capture are recorded, not run; a replay runs
// them and appends their records (Backend::AppendReplayedOps); host round trips and
// allocations inside a capture fail the test; every call is logged. With async_downloads, a
// DownloadAsync lands only at the next EndStep/Synchronize/Download, copied then (its host bytes
// are poisoned until it lands), so a runner that reads them early, or lets a later op overwrite
// the source first, reads the wrong tokens, as it would on CUDA's stream. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace saturn::testing_runner {

class CapturingBackend final : public Backend {
 public:
  explicit CapturingBackend(std::unique_ptr<Backend> cpu) : cpu_(std::move(cpu)) {}

  std::vector<std::string> log;
  std::string fail_in_capture;        // an op kind that fails while capturing ("" = none)
  bool fuse_rope_kv_write = false;    // FusesRopeKvWrite, as CUDA's fused kernels do
  int fuse_gemm_swiglu_max_rows = 0;  // FusesGemmSwiGlu up to this many rows (CUDA fused: 16)
  bool async_downloads = false;       // DownloadAsync lands late and RunsAsync() is true

  std::string name() const override { return "capturing-cpu"; }
  std::string device_name() const override { return cpu_->device_name(); }
  DType compute_dtype() const override { return cpu_->compute_dtype(); }
  size_t device_memory_bytes() const override { return cpu_->device_memory_bytes(); }
  bool per_op_timing_is_cheap() const override { return false; }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    if (absl::Status s = Host("allocate"); !s.ok()) return s;
    return cpu_->Allocate(bytes);
  }
  absl::Status Upload(const void* host, const Tensor& dst) override {
    if (absl::Status s = Host("upload"); !s.ok()) return s;
    return cpu_->Upload(host, dst);
  }
  absl::Status Zero(const Tensor& dst) override {
    if (absl::Status s = Host("zero"); !s.ok()) return s;
    return cpu_->Zero(dst);
  }
  absl::Status UploadF32(const float* host, const Tensor& dst) override {
    if (absl::Status s = Host("upload_f32"); !s.ok()) return s;
    return cpu_->UploadF32(host, dst);
  }
  absl::Status Download(const Tensor& src, void* host) override {
    if (absl::Status s = Host("download"); !s.ok()) return s;
    if (absl::Status s = Land(); !s.ok()) return s;
    return cpu_->Download(src, host);
  }
  absl::Status DownloadAsync(const Tensor& src, void* host) override {
    if (absl::Status s = Host("download_async"); !s.ok()) return s;
    if (!async_downloads) return cpu_->Download(src, host);
    std::memset(host, 0xA5, src.bytes());
    queued_.emplace_back(src, host);
    return absl::OkStatus();
  }
  bool RunsAsync() const override { return async_downloads; }
  absl::Status Synchronize() override {
    if (absl::Status s = Host("synchronize"); !s.ok()) return s;
    if (absl::Status s = Land(); !s.ok()) return s;
    return cpu_->Synchronize();
  }
  void Free(void*) override { ADD_FAILURE() << "buffers are owned by the CPU backend"; }

  void BeginStep(bool per_op) override {
    log.push_back("begin_step");
    Backend::BeginStep(per_op);
  }
  void MarkStepEnd() override { log.push_back("mark_step_end"); }
  absl::StatusOr<StepTiming> EndStep() override {
    log.push_back("end_step");
    if (absl::Status s = Land(); !s.ok()) return s;
    return Backend::EndStep();
  }

  bool FusesRopeKvWrite() const override { return fuse_rope_kv_write; }
  bool FusesGemmSwiGlu(const Tensor& x, const Tensor&, const Tensor&) const override {
    return x.rows <= fuse_gemm_swiglu_max_rows;
  }
  bool SupportsGraphs() const override { return true; }
  absl::Status BeginGraphCapture() override {
    log.push_back("begin_capture");
    if (capturing_) return absl::FailedPreconditionError("already capturing");
    capturing_ = true;
    capture_first_op_ = ops_.size();
    pending_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<int> EndGraphCapture() override {
    log.push_back("end_capture");
    if (!capturing_) return absl::FailedPreconditionError("not capturing");
    capturing_ = false;
    Graph g;
    g.ops.assign(ops_.begin() + capture_first_op_, ops_.end());
    ops_.resize(capture_first_op_);
    g.run = std::move(pending_);
    graphs_.push_back(std::move(g));
    return static_cast<int>(graphs_.size() - 1);
  }
  absl::Status AbortGraphCapture() override {
    log.push_back("abort_capture");
    capturing_ = false;
    ops_.resize(std::min(capture_first_op_, ops_.size()));
    pending_.clear();
    return absl::OkStatus();
  }
  absl::Status ReplayGraph(int handle) override {
    log.push_back("replay");
    if (handle < 0 || handle >= static_cast<int>(graphs_.size()) || graphs_[handle].released) {
      return absl::InvalidArgumentError(absl::StrCat("ReplayGraph: unknown handle ", handle));
    }
    const Graph& g = graphs_[handle];
    const double begin = Now();
    for (const auto& fn : g.run) {
      if (absl::Status s = fn(); !s.ok()) return s;
    }
    AppendReplayedOps(g.ops, begin, Now());
    return absl::OkStatus();
  }
  absl::Status ReleaseGraph(int handle) override {
    log.push_back("release");
    if (handle < 0 || handle >= static_cast<int>(graphs_.size()) || graphs_[handle].released) {
      return absl::InvalidArgumentError(absl::StrCat("ReleaseGraph: unknown handle ", handle));
    }
    graphs_[handle] = Graph{};
    graphs_[handle].released = true;
    return absl::OkStatus();
  }
  size_t num_graphs() const { return graphs_.size(); }
  // Graphs captured and not released.
  int live_graphs() const {
    return static_cast<int>(
        std::count_if(graphs_.begin(), graphs_.end(), [](const Graph& g) { return !g.released; }));
  }

 protected:
  using Fn = std::function<absl::Status()>;
  // The queued async downloads, copied now (the device's stream reaching them).
  absl::Status Land() {
    std::vector<std::pair<Tensor, void*>> queued;
    queued.swap(queued_);
    for (const auto& [src, host] : queued) {
      if (absl::Status s = cpu_->Download(src, host); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  std::vector<std::pair<Tensor, void*>> queued_;
  absl::Status DoEmbedding(const Tensor& ids, const Tensor& t, const Tensor& out) override {
    return Op("embedding", [=, this] { return cpu_->Embedding(ids, t, out); });
  }
  absl::Status DoGemm(const Tensor& x, const Tensor& w, const Tensor& out) override {
    return Op("gemm", [=, this] { return cpu_->Gemm(x, w, out); });
  }
  absl::Status DoRmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    return Op("rms_norm", [=, this] { return cpu_->RmsNorm(x, w, eps, out); });
  }
  absl::Status DoAddRmsNorm(const Tensor& x, const Tensor& r, const Tensor& w, float eps,
                            const Tensor& out) override {
    return Op("add_rms_norm", [=, this] { return cpu_->AddRmsNorm(x, r, w, eps, out); });
  }
  absl::Status DoRope(const Tensor& q, const Tensor& k, const Tensor& pos, int hd,
                      const RopeParams& rope) override {
    return Op("rope", [=, this] { return cpu_->Rope(q, k, pos, hd, rope); });
  }
  absl::Status DoKvWrite(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& kc,
                         const Tensor& vc) override {
    return Op("kv_write", [=, this] { return cpu_->KvWrite(k, v, slots, kc, vc); });
  }
  absl::Status DoRopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                             int hd, const RopeParams& rope, const Tensor& slots, const Tensor& kc,
                             const Tensor& vc) override {
    return Op("rope_kv_write", [=, this] {
      if (absl::Status s = cpu_->Rope(q, k, pos, hd, rope); !s.ok()) return s;
      return cpu_->KvWrite(k, v, slots, kc, vc);
    });
  }
  absl::Status DoAttention(const Tensor& q, const Tensor& kc, const Tensor& vc,
                           const AttentionBatch& b, const AttentionShape& sh,
                           const Tensor& out) override {
    return Op("attention", [=, this] { return cpu_->Attention(q, kc, vc, b, sh, out); });
  }
  absl::Status DoSwiGlu(const Tensor& gu, const Tensor& out) override {
    return Op("swiglu", [=, this] { return cpu_->SwiGlu(gu, out); });
  }
  absl::Status DoGemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                            const Tensor& act) override {
    return Op("gemm_swiglu", [=, this] {
      if (absl::Status s = cpu_->Gemm(x, w, gate_up); !s.ok()) return s;
      return cpu_->SwiGlu(gate_up, act);
    });
  }
  absl::Status DoAdd(const Tensor& a, const Tensor& b, const Tensor& out) override {
    return Op("add", [=, this] { return cpu_->Add(a, b, out); });
  }
  absl::Status DoGatherRows(const Tensor& x, const Tensor& idx, const Tensor& out) override {
    return Op("gather_rows", [=, this] { return cpu_->GatherRows(x, idx, out); });
  }
  absl::Status DoSample(const Tensor& logits, const SamplingBatch& p,
                        const Tensor& tokens) override {
    return Op("sample", [=, this] { return cpu_->Sample(logits, p, tokens); });
  }
  absl::Status DoCopy(const Tensor& src, const Tensor& dst) override {
    return Op("copy", [=, this] { return cpu_->Copy(src, dst); });
  }
  void MarkOpDeviceBegin(size_t) override {}
  void MarkOpDeviceEnd(size_t) override {}
  absl::Status ResolveDeviceTimes(StepTiming*) override { return absl::OkStatus(); }

 private:
  struct Graph {
    std::vector<OpRecord> ops;
    std::vector<Fn> run;
    bool released = false;
  };
  static double Now() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Host round trips and allocations are refused inside a capture, as on CUDA.
  absl::Status Host(const char* what) {
    log.push_back(what);
    if (!capturing_) return absl::OkStatus();
    ADD_FAILURE() << what << " inside a graph capture";
    return absl::FailedPreconditionError(absl::StrCat(what, " during capture"));
  }
  absl::Status Op(const char* kind, Fn fn) {
    log.push_back(absl::StrCat(capturing_ ? "captured:" : "op:", kind));
    if (capturing_) {
      if (fail_in_capture == kind) return absl::InternalError("injected capture failure");
      pending_.push_back(std::move(fn));
      return absl::OkStatus();
    }
    return fn();
  }

  std::unique_ptr<Backend> cpu_;
  bool capturing_ = false;
  size_t capture_first_op_ = 0;
  std::vector<Fn> pending_;
  std::vector<Graph> graphs_;
};

}  // namespace saturn::testing_runner
