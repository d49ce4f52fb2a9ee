// Backend base: shape checks, the cost model hook and per-op records. The Do* work lives in
// the backends.
#include "kernels/backend.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "kernels/base/clock.h"
#include "kernels/base/status_macros.h"
#include "kernels/op_cost.h"

namespace saturn {
namespace {

// Returns INVALID_ARGUMENT "op: what" from the enclosing function when `ok` is false. `what`
// (often shapes put into words) is built only then: these checks run for every op of every
// step, and building their messages eagerly cost the host path tens of us per step.
#define SATURN_EXPECT(ok, op, what)                                             \
  do {                                                                          \
    if (!(ok)) return absl::InvalidArgumentError(absl::StrCat(op, ": ", what)); \
  } while (0)

absl::Status ExpectShape(const char* op, const char* name, const Tensor& t, int64_t rows,
                         int64_t cols) {
  SATURN_EXPECT(t.rows == rows && t.cols == cols && t.data != nullptr, op,
                absl::StrCat(name, " is ", t.ShapeString(), ", expected [", rows, ", ", cols, "]"));
  return absl::OkStatus();
}

absl::Status ExpectDType(const char* op, const char* name, const Tensor& t, DType d) {
  SATURN_EXPECT(t.dtype == d, op,
                absl::StrCat(name, " has dtype ", DTypeName(t.dtype), ", expected ", DTypeName(d)));
  return absl::OkStatus();
}

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }
// A GEMM weight: floating point, or a block format whose rows are whole blocks.
bool IsWeight(const Tensor& w) {
  return IsFloat(w.dtype) || (IsBlockQuantized(w.dtype) && w.cols % DTypeBlockElems(w.dtype) == 0);
}

// A weight in a layout other than rows must be the one this backend uploads GEMM weights in.
absl::Status CheckWeightLayout(const char* op, const Backend& b, const Tensor& w) {
  SATURN_EXPECT(w.layout == Layout::kRows || w.layout == b.GemmWeightLayout(w.dtype), op,
                absl::StrCat("w is ", w.ShapeString(), ", a layout the ", b.name(),
                             " backend does not read for ", DTypeName(w.dtype), " weights"));
  return absl::OkStatus();
}

// The checks of the ops that fused ops stand for, under the name of the op that makes them.
absl::Status CheckGemm(const char* op, const Tensor& x, const Tensor& w, const Tensor& out) {
  SATURN_EXPECT(x.layout == Layout::kRows && out.layout == Layout::kRows, op,
                "x and out must be row-major");
  SATURN_EXPECT(x.cols == w.cols, op,
                absl::StrCat("x is ", x.ShapeString(), " but w is ", w.ShapeString(),
                             " (inner dimensions differ)"));
  RETURN_IF_ERROR(ExpectShape(op, "out", out, x.rows, w.rows));
  SATURN_EXPECT(IsFloat(x.dtype) && IsWeight(w) && IsFloat(out.dtype), op,
                absl::StrCat("x and out must be floating point and w floating point or whole "
                             "blocks of a block format; w is ",
                             w.ShapeString()));
  return absl::OkStatus();
}

absl::Status CheckSwiGlu(const char* op, const Tensor& gate_up, const Tensor& out) {
  RETURN_IF_ERROR(ExpectShape(op, "out", out, gate_up.rows, gate_up.cols / 2));
  SATURN_EXPECT(gate_up.cols % 2 == 0, op, "gate_up width must be even");
  return absl::OkStatus();
}

absl::Status CheckRope(const char* op, const Tensor& q, const Tensor& k, const Tensor& positions,
                       int head_dim) {
  SATURN_EXPECT(head_dim > 0 && head_dim % 2 == 0, op, "head_dim must be even");
  SATURN_EXPECT(q.cols % head_dim == 0 && k.cols % head_dim == 0, op,
                "q and k widths must be multiples of head_dim");
  SATURN_EXPECT(k.rows == q.rows, op, "q and k row counts differ");
  RETURN_IF_ERROR(ExpectDType(op, "positions", positions, DType::kI32));
  return ExpectShape(op, "positions", positions, 1, q.rows);
}

absl::Status CheckKvWrite(const char* op, const Tensor& k, const Tensor& v,
                          const Tensor& slot_mapping, const Tensor& k_cache,
                          const Tensor& v_cache) {
  RETURN_IF_ERROR(ExpectShape(op, "v", v, k.rows, k.cols));
  RETURN_IF_ERROR(ExpectDType(op, "slot_mapping", slot_mapping, DType::kI32));
  RETURN_IF_ERROR(ExpectShape(op, "slot_mapping", slot_mapping, 1, k.rows));
  SATURN_EXPECT(k_cache.cols == k.cols && v_cache.cols == k.cols, op,
                "cache width differs from k/v width");
  return absl::OkStatus();
}

}  // namespace

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    owner_ = o.owner_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.owner_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (ptr_ != nullptr && owner_ != nullptr) owner_->Free(ptr_);
  ptr_ = nullptr;
  owner_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<void*> Backend::AllocateHost(size_t bytes) {
  void* p = ::operator new (std::max<size_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("AllocateHost: ", bytes, " bytes"));
  }
  return p;
}

void Backend::FreeHost(void* ptr) {
  if (ptr != nullptr) ::operator delete (ptr, std::align_val_t{64});
}

template <typename Fn>
absl::Status Backend::Run(OpKind kind, const OpCost& cost, Fn&& fn) {
  const size_t index = ops_.size();
  OpRecord rec;
  rec.kind = kind;
  rec.cost = cost;
  rec.issue_begin_us = NowUs() - step_host_start_us_;
  ops_.push_back(rec);
  if (per_op_device_times_) MarkOpDeviceBegin(index);
  absl::Status s = fn();
  if (per_op_device_times_) MarkOpDeviceEnd(index);
  ops_[index].issue_end_us = NowUs() - step_host_start_us_;
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(OpKindName(kind), ": ", s.message()));
  }
  return s;
}

absl::Status Backend::Embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
  RETURN_IF_ERROR(ExpectDType("embedding", "ids", ids, DType::kI32));
  RETURN_IF_ERROR(ExpectShape("embedding", "ids", ids, 1, ids.cols));
  RETURN_IF_ERROR(ExpectShape("embedding", "out", out, ids.cols, table.cols));
  SATURN_EXPECT(out.dtype == table.dtype, "embedding", "out and table dtypes differ");
  SATURN_EXPECT(out.layout == Layout::kRows, "embedding", "out must be row-major");
  RETURN_IF_ERROR(CheckWeightLayout("embedding", *this, table));  // a tied LM head's layout
  return Run(OpKind::kEmbedding, cost::Embedding(ids, table, out),
             [&] { return DoEmbedding(ids, table, out); });
}

absl::Status Backend::Gemm(const Tensor& x, const Tensor& w, const Tensor& out) {
  RETURN_IF_ERROR(CheckGemm("gemm", x, w, out));
  RETURN_IF_ERROR(CheckWeightLayout("gemm", *this, w));
  if (x.rows == 0) return absl::OkStatus();
  return Run(OpKind::kGemm, cost::Gemm(x, w, out), [&] { return DoGemm(x, w, out); });
}

absl::Status Backend::GemmSplit(const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs) {
  SATURN_EXPECT(x.cols == w.cols, "gemm_split",
                absl::StrCat("x is ", x.ShapeString(), " but w is ", w.ShapeString(),
                             " (inner dimensions differ)"));
  SATURN_EXPECT(!outs.empty(), "gemm_split", "outs is empty");
  RETURN_IF_ERROR(CheckWeightLayout("gemm_split", *this, w));
  SATURN_EXPECT(x.layout == Layout::kRows, "gemm_split", "x must be row-major");
  int64_t cols = 0;
  for (const Tensor& o : outs) {
    SATURN_EXPECT(o.rows == x.rows && o.cols > 0 && o.data != nullptr && o.layout == Layout::kRows,
                  "gemm_split",
                  absl::StrCat("an out is ", o.ShapeString(), " but x has ", x.rows, " rows"));
    SATURN_EXPECT(o.dtype == outs[0].dtype, "gemm_split", "outs' dtypes differ");
    cols += o.cols;
  }
  SATURN_EXPECT(cols == w.rows, "gemm_split",
                absl::StrCat("outs' columns sum to ", cols, " but w is ", w.ShapeString()));
  SATURN_EXPECT(IsFloat(x.dtype) && IsWeight(w) && IsFloat(outs[0].dtype), "gemm_split",
                absl::StrCat("x and outs must be floating point and w floating point or whole "
                             "blocks of a block format; w is ",
                             w.ShapeString()));
  if (x.rows == 0) return absl::OkStatus();
  const Tensor whole{nullptr, outs[0].dtype, x.rows, w.rows};  // the outs side by side
  return Run(OpKind::kGemm, cost::Gemm(x, w, whole), [&] { return DoGemmSplit(x, w, outs); });
}

absl::Status Backend::DoGemmSplit(const Tensor& x, const Tensor& w, absl::Span<const Tensor> outs) {
  int64_t row = 0;
  for (const Tensor& o : outs) {
    RETURN_IF_ERROR(DoGemm(x, w.RowSlice(row, o.cols), o));
    row += o.cols;
  }
  return absl::OkStatus();
}

absl::Status Backend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  RETURN_IF_ERROR(ExpectShape("rms_norm", "weight", weight, 1, x.cols));
  RETURN_IF_ERROR(ExpectShape("rms_norm", "out", out, x.rows, x.cols));
  return Run(OpKind::kRmsNorm, cost::RmsNorm(x, weight),
             [&] { return DoRmsNorm(x, weight, eps, out); });
}

absl::Status Backend::AddRmsNorm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                 float eps, const Tensor& out) {
  RETURN_IF_ERROR(ExpectShape("add_rms_norm", "weight", weight, 1, x.cols));
  RETURN_IF_ERROR(ExpectShape("add_rms_norm", "residual", residual, x.rows, x.cols));
  RETURN_IF_ERROR(ExpectShape("add_rms_norm", "out", out, x.rows, x.cols));
  return Run(OpKind::kAddRmsNorm, cost::AddRmsNorm(x, weight),
             [&] { return DoAddRmsNorm(x, residual, weight, eps, out); });
}

absl::Status Backend::Rope(const Tensor& q, const Tensor& k, const Tensor& positions, int head_dim,
                           const RopeParams& rope) {
  RETURN_IF_ERROR(CheckRope("rope", q, k, positions, head_dim));
  return Run(OpKind::kRope, cost::Rope(q, k),
             [&] { return DoRope(q, k, positions, head_dim, rope); });
}

absl::Status Backend::KvWrite(const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
                              const Tensor& k_cache, const Tensor& v_cache) {
  RETURN_IF_ERROR(CheckKvWrite("kv_write", k, v, slot_mapping, k_cache, v_cache));
  return Run(OpKind::kKvWrite, cost::KvWrite(k, v, k_cache),
             [&] { return DoKvWrite(k, v, slot_mapping, k_cache, v_cache); });
}

absl::Status Backend::RopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& positions, int head_dim, const RopeParams& rope,
                                  const Tensor& slot_mapping, const Tensor& k_cache,
                                  const Tensor& v_cache) {
  if (!FusesRopeKvWrite()) {
    RETURN_IF_ERROR(Rope(q, k, positions, head_dim, rope));
    return KvWrite(k, v, slot_mapping, k_cache, v_cache);
  }
  RETURN_IF_ERROR(CheckRope("rope_kv_write", q, k, positions, head_dim));
  RETURN_IF_ERROR(CheckKvWrite("rope_kv_write", k, v, slot_mapping, k_cache, v_cache));
  return Run(OpKind::kRopeKvWrite, cost::RopeKvWrite(q, k, v, k_cache), [&] {
    return DoRopeKvWrite(q, k, v, positions, head_dim, rope, slot_mapping, k_cache, v_cache);
  });
}

absl::Status Backend::DoRopeKvWrite(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& positions, int head_dim, const RopeParams& rope,
                                    const Tensor& slot_mapping, const Tensor& k_cache,
                                    const Tensor& v_cache) {
  RETURN_IF_ERROR(DoRope(q, k, positions, head_dim, rope));
  return DoKvWrite(k, v, slot_mapping, k_cache, v_cache);
}

absl::Status Backend::Attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                const AttentionBatch& batch, const AttentionShape& shape,
                                const Tensor& out) {
  SATURN_EXPECT(
      shape.num_heads > 0 && shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0,
      "attention", "num_heads must be a positive multiple of num_kv_heads");
  RETURN_IF_ERROR(ExpectShape("attention", "q", q, q.rows,
                              static_cast<int64_t>(shape.num_heads) * shape.head_dim));
  RETURN_IF_ERROR(ExpectShape("attention", "out", out, q.rows, q.cols));
  SATURN_EXPECT(k_cache.cols == static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim &&
                    v_cache.cols == k_cache.cols,
                "attention", "cache width must be num_kv_heads * head_dim");
  RETURN_IF_ERROR(
      ExpectShape("attention", "query_start", batch.query_start, 1, batch.num_seqs + 1));
  RETURN_IF_ERROR(ExpectShape("attention", "context_lens", batch.context_lens, 1, batch.num_seqs));
  SATURN_EXPECT(batch.block_tables.rows == batch.num_seqs, "attention",
                "block_tables must have one row per sequence");
  SATURN_EXPECT(
      static_cast<int64_t>(batch.max_context_len) <= batch.block_tables.cols * shape.block_size,
      "attention", "max_context_len exceeds the block table width");
  return Run(OpKind::kAttention, cost::Attention(q, k_cache, batch, shape),
             [&] { return DoAttention(q, k_cache, v_cache, batch, shape, out); });
}

absl::Status Backend::SwiGlu(const Tensor& gate_up, const Tensor& out) {
  RETURN_IF_ERROR(CheckSwiGlu("swiglu", gate_up, out));
  return Run(OpKind::kSwiGlu, cost::SwiGlu(gate_up, out), [&] { return DoSwiGlu(gate_up, out); });
}

absl::Status Backend::GemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                                 const Tensor& act) {
  if (!FusesGemmSwiGlu(x, w, act)) {
    RETURN_IF_ERROR(Gemm(x, w, gate_up));
    return SwiGlu(gate_up, act);
  }
  RETURN_IF_ERROR(CheckGemm("gemm_swiglu", x, w, gate_up));
  RETURN_IF_ERROR(CheckWeightLayout("gemm_swiglu", *this, w));
  RETURN_IF_ERROR(CheckSwiGlu("gemm_swiglu", gate_up, act));
  if (x.rows == 0) return absl::OkStatus();
  return Run(OpKind::kGemmSwiGlu, cost::GemmSwiGlu(x, w, act),
             [&] { return DoGemmSwiGlu(x, w, gate_up, act); });
}

absl::Status Backend::DoGemmSwiGlu(const Tensor& x, const Tensor& w, const Tensor& gate_up,
                                   const Tensor& act) {
  RETURN_IF_ERROR(DoGemm(x, w, gate_up));
  return DoSwiGlu(gate_up, act);
}

absl::Status Backend::Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  RETURN_IF_ERROR(ExpectShape("add", "b", b, a.rows, a.cols));
  RETURN_IF_ERROR(ExpectShape("add", "out", out, a.rows, a.cols));
  return Run(OpKind::kAdd, cost::Add(a), [&] { return DoAdd(a, b, out); });
}

absl::Status Backend::GatherRows(const Tensor& x, const Tensor& indices, const Tensor& out) {
  RETURN_IF_ERROR(ExpectDType("gather_rows", "indices", indices, DType::kI32));
  RETURN_IF_ERROR(ExpectShape("gather_rows", "out", out, indices.cols, x.cols));
  SATURN_EXPECT(out.dtype == x.dtype, "gather_rows", "out and x dtypes differ");
  return Run(OpKind::kGatherRows, cost::GatherRows(out),
             [&] { return DoGatherRows(x, indices, out); });
}

absl::Status Backend::Sample(const Tensor& logits, const SamplingBatch& p, const Tensor& tokens) {
  const int64_t b = logits.rows;
  RETURN_IF_ERROR(ExpectDType("sample", "logits", logits, DType::kF32));
  RETURN_IF_ERROR(ExpectShape("sample", "tokens", tokens, 1, b));
  RETURN_IF_ERROR(ExpectShape("sample", "temperature", p.temperature, 1, b));
  RETURN_IF_ERROR(ExpectShape("sample", "top_k", p.top_k, 1, b));
  RETURN_IF_ERROR(ExpectShape("sample", "top_p", p.top_p, 1, b));
  RETURN_IF_ERROR(ExpectShape("sample", "seed", p.seed, 1, b));
  RETURN_IF_ERROR(ExpectShape("sample", "step", p.step, 1, b));
  RETURN_IF_ERROR(ExpectDType("sample", "seed", p.seed, DType::kI64));
  return Run(OpKind::kSample, cost::Sample(logits), [&] { return DoSample(logits, p, tokens); });
}

absl::Status Backend::Copy(const Tensor& src, const Tensor& dst) {
  SATURN_EXPECT(src.bytes() == dst.bytes() && src.dtype == dst.dtype, "copy",
                "src and dst differ in dtype or size");
  return Run(OpKind::kCopy, cost::Copy(src), [&] { return DoCopy(src, dst); });
}

absl::Status Backend::AllReduce(const Tensor& x) {
  SATURN_EXPECT(comm_ != nullptr, "all_reduce", "no tensor-parallel group is set");
  SATURN_EXPECT(x.layout == Layout::kRows && x.dtype == DType::kF32 && x.data != nullptr,
                "all_reduce",
                absl::StrCat("x is ", x.ShapeString(), " in ", DTypeName(x.dtype),
                             "; the group sums row-major f32"));
  return Run(OpKind::kAllReduce, cost::AllReduce(x, comm_->size()), [&] { return DoAllReduce(x); });
}

absl::Status Backend::GatherColumns(const Tensor& part, const std::vector<int64_t>& counts,
                                    const Tensor& whole) {
  SATURN_EXPECT(comm_ != nullptr, "gather_columns", "no tensor-parallel group is set");
  SATURN_EXPECT(static_cast<int>(counts.size()) == comm_->size(), "gather_columns",
                absl::StrCat(counts.size(), " column counts for ", comm_->size(), " ranks"));
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  SATURN_EXPECT(part.dtype == DType::kF32 && part.layout == Layout::kRows && part.data != nullptr &&
                    part.cols == counts[comm_->rank()],
                "gather_columns",
                absl::StrCat("part is ", part.ShapeString(), ", expected f32 rows of ",
                             counts[comm_->rank()], " columns"));
  SATURN_EXPECT(comm_->rank() != 0 || (whole.dtype == DType::kF32 && whole.data != nullptr &&
                                       whole.rows == part.rows && whole.cols == total),
                "gather_columns",
                absl::StrCat("whole is ", whole.ShapeString(), ", expected f32 [", part.rows, ", ",
                             total, "]"));
  return Run(OpKind::kGatherColumns, cost::GatherColumns(whole, comm_->size()),
             [&] { return DoGatherColumns(part, counts, whole); });
}

absl::Status Backend::DoGatherColumns(const Tensor& part, const std::vector<int64_t>& counts,
                                      const Tensor& whole) {
  const int64_t rows = part.rows;
  std::vector<int64_t> sizes(counts.size());
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) total += sizes[r] = counts[r] * rows;
  const bool root = comm_->rank() == 0;
  // One row: the ranks' slices already lie in column order.
  float* recv = root && rows == 1 ? static_cast<float*>(whole.data) : nullptr;
  if (root && recv == nullptr) {
    gather_staging_.resize(static_cast<size_t>(total));
    recv = gather_staging_.data();
  }
  RETURN_IF_ERROR(comm_->GatherFloats(static_cast<const float*>(part.data), sizes, recv, 0));
  if (!root || rows == 1) return absl::OkStatus();
  // Rank-major [rank][row][its columns] -> row-major [row][all columns].
  float* out = static_cast<float*>(whole.data);
  const int64_t width = whole.cols;
  int64_t col = 0, at = 0;
  for (int64_t c : counts) {
    for (int64_t i = 0; i < rows; ++i) std::copy_n(recv + at + i * c, c, out + i * width + col);
    at += c * rows;
    col += c;
  }
  return absl::OkStatus();
}

absl::Status Backend::DoAllReduce(const Tensor& x) {
  return comm_->AllReduceSum(static_cast<float*>(x.data), x.rows * x.cols);
}

void Backend::AppendReplayedOps(const std::vector<OpRecord>& ops, double issue_begin_us,
                                double issue_end_us) {
  bool first = true;
  for (OpRecord op : ops) {
    op.issue_begin_us = first ? issue_begin_us : issue_end_us;
    op.issue_end_us = issue_end_us;
    op.device_begin_us = -1;
    op.device_end_us = -1;
    ops_.push_back(op);
    first = false;
  }
  replayed_ops_ += static_cast<int>(ops.size());
}

void Backend::BeginStep(bool per_op_device_times) {
  ops_.clear();
  replayed_ops_ = 0;
  per_op_device_times_ = per_op_device_times;
  step_host_start_us_ = NowUs();
}

absl::StatusOr<StepTiming> Backend::EndStep() {
  StepTiming timing;
  RETURN_IF_ERROR(ResolveDeviceTimes(&timing));
  timing.ops = ops_;
  timing.per_op_device_times = per_op_device_times_;
  timing.replayed_ops = replayed_ops_;
  for (const OpRecord& op : timing.ops) timing.issue_us += op.issue_end_us - op.issue_begin_us;
  if (per_op_device_times_) {
    // Union of device intervals (ops on one stream do not overlap, but be safe).
    std::vector<std::pair<double, double>> iv;
    for (const OpRecord& op : timing.ops) {
      if (op.device_begin_us >= 0) iv.emplace_back(op.device_begin_us, op.device_end_us);
    }
    std::sort(iv.begin(), iv.end());
    double busy = 0, cur_b = -1, cur_e = -1;
    for (auto [b, e] : iv) {
      if (b > cur_e) {
        if (cur_e > cur_b) busy += cur_e - cur_b;
        cur_b = b;
        cur_e = e;
      } else {
        cur_e = std::max(cur_e, e);
      }
    }
    if (cur_e > cur_b) busy += cur_e - cur_b;
    timing.device_busy_us = busy;
    if (!iv.empty()) timing.device_span_us = cur_e - iv.front().first;
  }
  return timing;
}

absl::Status Backend::BeginGraphCapture() {
  return absl::FailedPreconditionError(absl::StrCat(
      "the ", name(), " backend has no graph capture (CUDA graphs need --backend=cuda)"));
}
absl::StatusOr<int> Backend::EndGraphCapture() { return BeginGraphCapture(); }
absl::Status Backend::AbortGraphCapture() { return BeginGraphCapture(); }
absl::Status Backend::ReplayGraph(int) { return BeginGraphCapture(); }
absl::Status Backend::ReleaseGraph(int) { return BeginGraphCapture(); }

}  // namespace saturn
