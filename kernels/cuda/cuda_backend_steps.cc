// CudaBackend's step timing (events resolved against the step's start) and CUDA graphs
// (capture, instantiate, replay, release); cuda_backend_impl.h holds the class.
#include "kernels/cuda/cuda_backend_impl.h"

namespace saturn {
namespace cuda_detail {

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

}  // namespace cuda_detail
}  // namespace saturn
