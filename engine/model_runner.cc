// The model runner: StepPlan -> flat inputs -> backend ops -> sampled tokens. See the header
// for the per-step op sequence and the graph rules.
#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/logprobs.h"
#include "engine/measure/line_fit.h"
#include "engine/model_runner_state.h"
#include "engine/tp/tp_shard.h"
#include "kernels/base/clock.h"
#include "kernels/base/status_macros.h"
#include "kernels/op_cost.h"

namespace saturn {

ModelRunner::ModelRunner(Backend* backend, const ModelConfig& model, const RunnerConfig& config)
    : backend_(backend),
      model_(model),
      shard_(ShardConfig(model, std::max(1, config.tp_size))),
      config_(config) {}

ModelRunner::~ModelRunner() {
  if (tp_session_open_) {
    TpHeader h;
    h.kind = static_cast<int64_t>(TpMessage::kStop);
    // A group whose peer is gone cannot be told; its launcher ends it.
    (void)backend_->communicator()->Broadcast(&h, sizeof(h), 0);
  }
}

absl::Status ModelRunner::ShareStep(int num_tokens, int num_seqs, int num_sample_rows,
                                    int max_query_len, int max_context_len) {
  const Buffers& b = *buf_;
  const size_t staging = b.layout.end, flags = static_cast<size_t>(num_seqs),
               from = static_cast<size_t>(num_seqs) * sizeof(int32_t);
  TpHeader h;
  h.kind = static_cast<int64_t>(TpMessage::kStep);
  h.seq = ++tp_seq_;
  tp_step_start_us_ = NowUs();
  MarkTpStepStart();
  h.payload_bytes = static_cast<int64_t>(staging + flags + from);
  h.num_tokens = num_tokens;
  h.num_seqs = num_seqs;
  h.sample_rows = num_sample_rows;
  h.max_query = max_query_len;
  h.max_context = max_context_len;
  h.attended_pairs = b.attended_pairs;
  h.context_tokens = b.context_tokens;
  tp_message_.resize(h.payload_bytes);
  std::memcpy(tp_message_.data(), b.h_inputs.get(), staging);
  std::memcpy(tp_message_.data() + staging, b.h_prefill.data(), flags);
  std::memcpy(tp_message_.data() + staging + flags, b.h_decode_from.data(), from);
  Communicator* comm = backend_->communicator();
  RETURN_IF_ERROR(comm->Broadcast(&h, sizeof(h), 0));
  return comm->Broadcast(tp_message_.data(), tp_message_.size(), 0);
}

absl::Status ModelRunner::ServeStep(const TpHeader& h) {
  if (!tp_worker()) return absl::FailedPreconditionError("ServeStep: not a tensor-parallel worker");
  Buffers& b = *buf_;
  const int width = b.max_blocks_per_seq;
  if (h.num_tokens < 0 || h.num_tokens > b.max_tokens || h.num_seqs < 0 ||
      h.num_seqs > b.max_seqs || h.sample_rows < 0 || h.sample_rows > b.max_seqs) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel: a step of ", h.num_tokens,
                                                   " tokens and ", h.num_seqs,
                                                   " sequences exceeds this rank's buffers"));
  }
  b.layout = LayoutFor(h.num_tokens, h.num_seqs, h.sample_rows, width);
  const size_t staging = b.layout.end, flags = static_cast<size_t>(h.num_seqs),
               from = static_cast<size_t>(h.num_seqs) * sizeof(int32_t);
  if (static_cast<size_t>(h.payload_bytes) != staging + flags + from) {
    return absl::InternalError(absl::StrCat("tensor_parallel: a step's inputs are ",
                                            h.payload_bytes, " bytes, its counts make ",
                                            staging + flags + from));
  }
  tp_message_.resize(h.payload_bytes);
  RETURN_IF_ERROR(backend_->communicator()->Broadcast(tp_message_.data(), tp_message_.size(), 0));
  std::memcpy(b.h_inputs.get(), tp_message_.data(), staging);
  b.h_prefill.assign(tp_message_.data() + staging, tp_message_.data() + staging + flags);
  b.h_decode_from.resize(h.num_seqs);
  std::memcpy(b.h_decode_from.data(), tp_message_.data() + staging + flags, from);
  b.attended_pairs = h.attended_pairs;
  b.context_tokens = h.context_tokens;
  tp_seq_ = h.seq;
  MarkTpStepStart();
  backend_->BeginStep(true);
  RETURN_IF_ERROR(backend_->Upload(
      b.h_inputs.get(),
      b.inputs.View(DType::kI32, 1, static_cast<int64_t>(staging / sizeof(int32_t)))));
  RETURN_IF_ERROR(Forward(static_cast<int>(h.num_tokens), static_cast<int>(h.num_seqs),
                          static_cast<int>(h.sample_rows), static_cast<int>(h.max_query),
                          static_cast<int>(h.max_context), /*keep_logits=*/false));
  backend_->MarkStepEnd();
  ASSIGN_OR_RETURN(const StepTiming timing, backend_->EndStep());
  LogTpStep(timing);
  return absl::OkStatus();
}

namespace {
constexpr size_t kTpLogSteps = 8192;  // about 1.5 MB at 16 layers
}  // namespace

void ModelRunner::MarkTpStepStart() {
  if (!tp_threads_tracked_) {
    tp_threads_tracked_ = true;
    tp_threads_.Track(CurrentThreadId());
    for (int tid : backend_->HostThreadIds()) {
      if (tid > 0) tp_threads_.Track(tid);
    }
  }
  tp_sched_at_start_ = tp_threads_.Read();
}

void ModelRunner::LogTpStep(const StepTiming& timing) {
  TpStepEntry e;
  if (const SchedStat now = tp_threads_.Read(); now.available && tp_sched_at_start_.available) {
    e.run_us = static_cast<float>((now.run_ns - tp_sched_at_start_.run_ns) * 1e-3);
    e.wait_us = static_cast<float>((now.wait_ns - tp_sched_at_start_.wait_ns) * 1e-3);
  }
  e.seq = tp_seq_;
  e.start_us = tp_worker() ? 0 : tp_step_start_us_;
  e.step_us = timing.device_span_us;
  for (const OpRecord& op : timing.ops) {
    if (op.kind == OpKind::kAllReduce && op.device_end_us >= 0) {
      e.comm_us.push_back(static_cast<float>(op.device_end_us - op.device_begin_us));
    }
  }
  tp_log_.push_back(std::move(e));
  if (tp_log_.size() > kTpLogSteps) tp_log_.pop_front();
}

namespace {

constexpr int kCommTrials = 3, kCommCalls = 20;

// The all-reduces of one probe, the same on every rank: for each size, kCommTrials trials of
// kCommCalls calls; the best trial's time per call, per size (rank 0's clock).
absl::StatusOr<std::vector<double>> RunCommProbe(Communicator* comm,
                                                 const std::vector<int64_t>& counts) {
  int64_t most = 1;
  for (int64_t c : counts) most = std::max(most, c);
  std::vector<float> x(static_cast<size_t>(most), 0.5f);
  std::vector<double> best;
  for (int64_t c : counts) {
    double fastest = 0;
    for (int t = 0; t < kCommTrials; ++t) {
      RETURN_IF_ERROR(comm->AllReduceSum(x.data(), c));  // the ranks start together
      std::fill(x.begin(), x.begin() + c, 0.5f);
      const double t0 = NowUs();
      for (int i = 0; i < kCommCalls; ++i) RETURN_IF_ERROR(comm->AllReduceSum(x.data(), c));
      const double us = (NowUs() - t0) / kCommCalls;
      fastest = t == 0 ? us : std::min(fastest, us);
    }
    best.push_back(fastest);
  }
  return best;
}

}  // namespace

absl::Status ModelRunner::ServeCommProbe(const TpHeader& h) {
  if (h.num_tokens < 1 || h.num_tokens > 64 ||
      h.payload_bytes != h.num_tokens * static_cast<int64_t>(sizeof(int64_t))) {
    return absl::InvalidArgumentError("tensor_parallel: a malformed all-reduce probe");
  }
  std::vector<int64_t> counts(h.num_tokens);
  Communicator* comm = backend_->communicator();
  RETURN_IF_ERROR(comm->Broadcast(counts.data(), h.payload_bytes, 0));
  for (int64_t c : counts) {
    if (c < 1 || c > int64_t{1} << 26)
      return absl::InvalidArgumentError("tensor_parallel: probe size");
  }
  return RunCommProbe(comm, counts).status();
}

absl::Status ModelRunner::CalibrateAllReduce(Calibration* cal) {
  if (config_.tp_size <= 1 || tp_worker()) return absl::OkStatus();
  Communicator* comm = backend_->communicator();
  std::vector<int64_t> counts;
  for (int64_t rows : {1, 8, 64, 512}) {
    if (rows <= buf_->max_tokens) counts.push_back(rows * model_.hidden_size);
  }
  TpHeader h;
  h.kind = static_cast<int64_t>(TpMessage::kCommProbe);
  h.num_tokens = static_cast<int64_t>(counts.size());
  h.payload_bytes = h.num_tokens * static_cast<int64_t>(sizeof(int64_t));
  RETURN_IF_ERROR(comm->Broadcast(&h, sizeof(h), 0));
  RETURN_IF_ERROR(comm->Broadcast(counts.data(), h.payload_bytes, 0));
  ASSIGN_OR_RETURN(const std::vector<double> us, RunCommProbe(comm, counts));
  // Time on bus bytes: t = latency + bytes / bandwidth, neither negative.
  const double n = comm->size(), bus = 2.0 * (n - 1) / n;
  std::vector<double> bytes;
  for (int64_t c : counts) bytes.push_back(bus * 4.0 * c);
  double latency = 0, us_per_byte = 0;
  FitNonNegativeLine(bytes, us, &latency, &us_per_byte);
  cal->allreduce_latency_us = latency;
  cal->allreduce_bytes_per_s = us_per_byte > 0 ? 1e6 / us_per_byte : 0;
  std::string sizes;
  for (size_t i = 0; i < counts.size(); ++i) {
    absl::StrAppend(&sizes, i ? ", " : "", counts[i] * 4 / 1024, " KB ", absl::SixDigits(us[i]),
                    " us");
  }
  cal->allreduce_method =
      absl::StrCat(comm->transport(), ": f32 sums of 1-512 rows of ", model_.hidden_size, " (",
                   sizes, "), best of ", kCommTrials, " trials of ", kCommCalls,
                   " calls, fitted as latency + bus bytes / bandwidth");
  return absl::OkStatus();
}

absl::Status ModelRunner::ServeFetch(const TpHeader& h) {
  std::vector<TpStepEntry> since;
  for (const TpStepEntry& e : tp_log_) {
    if (e.seq >= h.seq) since.push_back(e);
  }
  return backend_->communicator()->Gather(PackTpLog(since), 0).status();
}

absl::StatusOr<TpStats> ModelRunner::CollectTpStats(double begin_us, double end_us) {
  if (config_.tp_size <= 1 || tp_worker()) return TpStats{};
  Communicator* comm = backend_->communicator();
  std::vector<std::vector<TpStepEntry>> logs(config_.tp_size);
  for (const TpStepEntry& e : tp_log_) {
    if (e.start_us >= begin_us && e.start_us <= end_us) logs[0].push_back(e);
  }
  TpHeader h;
  h.kind = static_cast<int64_t>(TpMessage::kFetch);
  h.seq = logs[0].empty() ? tp_seq_ + 1 : logs[0].front().seq;
  RETURN_IF_ERROR(comm->Broadcast(&h, sizeof(h), 0));
  ASSIGN_OR_RETURN(const std::vector<std::string> parts, comm->Gather(PackTpLog({}), 0));
  for (int r = 1; r < config_.tp_size; ++r) {
    if (!UnpackTpLog(parts[r], &logs[r])) {
      return absl::InternalError(
          absl::StrCat("tensor_parallel: rank ", r, "'s step log is malformed"));
    }
  }
  TpStats s = CombineTpLogs(logs, begin_us, end_us);
  s.transport = comm->transport();
  s.single_host = comm->single_host();
  return s;
}

absl::StatusOr<int> ModelRunner::PrepareInputs(const StepPlan& plan, int padded_seqs,
                                               const std::vector<int>& prev_sampled) {
  Buffers& b = *buf_;
  const int n = static_cast<int>(plan.seqs.size());
  const int num_seqs = std::max(n, padded_seqs);
  int num_tokens = 0;
  for (const ScheduledSeq& s : plan.seqs) num_tokens += s.num_new_tokens();
  num_tokens += num_seqs - n;  // one token per padding row
  if (num_seqs > b.max_seqs || num_tokens > b.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("step of ", num_seqs, " sequences and ",
                                                   num_tokens, " tokens exceeds the runner's ",
                                                   b.max_seqs, "/", b.max_tokens, " limits"));
  }
  const int bs = config_.block_size, width = b.max_blocks_per_seq, scratch = config_.num_kv_blocks;
  b.h_ids.assign(num_tokens, 0);
  b.h_positions.assign(num_tokens, 0);
  b.h_slots.assign(num_tokens, scratch * bs);
  b.h_query_start.assign(num_seqs + 1, 0);
  b.h_context_lens.assign(num_seqs, 1);
  b.h_prefill.assign(num_seqs, 0);
  b.h_decode_from.assign(num_seqs, 0);  // padding rows: decode rows
  b.h_sample_rows.clear();
  b.h_temperature.clear();
  b.h_top_k.clear();
  b.h_top_p.clear();
  b.h_seed.clear();
  b.h_step.clear();
  b.attended_pairs = 0;
  b.context_tokens = 0;
  int t = 0;
  for (int i = 0; i < num_seqs; ++i) {
    b.h_query_start[i] = t;
    int32_t* table = &b.h_block_tables[static_cast<size_t>(i) * width];
    if (i >= n) {  // padding row: one token in the scratch block, greedy
      std::fill(table, table + width, scratch);
      b.h_sample_rows.push_back(t);
      b.h_temperature.push_back(0.f);
      b.h_top_k.push_back(0);
      b.h_top_p.push_back(1.f);
      b.h_seed.push_back(0);
      b.h_step.push_back(0);
      ++t;
      continue;
    }
    const ScheduledSeq& s = plan.seqs[i];
    if (static_cast<int>(s.block_table.size()) > width ||
        s.context_len() > static_cast<int>(s.block_table.size()) * bs) {
      return absl::InternalError(
          absl::StrCat("request ", s.request_id, ": block table does not cover its context"));
    }
    b.h_prefill[i] = s.is_prefill ? 1 : 0;
    b.h_decode_from[i] = s.num_prompt;
    std::copy(s.block_table.begin(), s.block_table.end(), table);
    std::fill(table + s.block_table.size(), table + width, scratch);
    if (s.feed_from >= static_cast<int>(prev_sampled.size())) {
      return absl::InternalError(absl::StrCat("request ", s.request_id, ": its input is token ",
                                              s.feed_from, " of the previous step, which drew ",
                                              prev_sampled.size()));
    }
    for (int j = 0; j < s.num_new_tokens(); ++j, ++t) {
      const int pos = s.start_position + j;
      b.h_ids[t] = s.feed_from >= 0 && j + 1 == s.num_new_tokens() ? prev_sampled[s.feed_from]
                                                                   : s.token_ids[j];
      b.h_positions[t] = pos;
      b.h_slots[t] = s.block_table[pos / bs] * bs + pos % bs;
      b.attended_pairs += pos + 1;
    }
    b.h_context_lens[i] = s.context_len();
    b.context_tokens += s.context_len();
    // The last row samples; a speculating sequence's proposal rows too, each its own output
    // index.
    for (int j = s.sample ? s.num_draft : -1; j >= 0; --j) {
      b.h_sample_rows.push_back(t - 1 - j);
      b.h_temperature.push_back(s.sampling.temperature);
      b.h_top_k.push_back(s.sampling.top_k);
      b.h_top_p.push_back(s.sampling.top_p);
      b.h_seed.push_back(s.sampling.seed);
      b.h_step.push_back(s.sample_step + s.num_draft - j);
    }
  }
  b.h_query_start[num_seqs] = t;
  const int r = static_cast<int>(b.h_sample_rows.size());
  if (r > b.max_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("step samples ", r, " rows; the runner holds ", b.max_seqs));
  }
  // Pack into the staging buffer at this step's layout, then one upload of the whole step.
  b.layout = LayoutFor(num_tokens, num_seqs, r, width);
  char* stage = static_cast<char*>(b.h_inputs.get());
  auto pack = [&](size_t off, const auto& v, int64_t count) {
    if (count > 0) std::memcpy(stage + off, v.data(), count * sizeof(v[0]));
  };
  const InputLayout& l = b.layout;
  pack(l.ids, b.h_ids, num_tokens);
  pack(l.positions, b.h_positions, num_tokens);
  pack(l.slots, b.h_slots, num_tokens);
  pack(l.query_start, b.h_query_start, num_seqs + 1);
  pack(l.context_lens, b.h_context_lens, num_seqs);
  pack(l.block_tables, b.h_block_tables, int64_t{num_seqs} * width);
  pack(l.sample_rows, b.h_sample_rows, r);
  pack(l.temperature, b.h_temperature, r);
  pack(l.top_k, b.h_top_k, r);
  pack(l.top_p, b.h_top_p, r);
  pack(l.seed, b.h_seed, r);
  pack(l.step, b.h_step, r);
  RETURN_IF_ERROR(backend_->Upload(
      stage, b.inputs.View(DType::kI32, 1, static_cast<int64_t>(l.end / sizeof(int32_t)))));
  return r;
}

absl::Status ModelRunner::Forward(int num_tokens, int num_seqs, int num_sample_rows,
                                  int max_query_len, int max_context_len, bool keep_logits) {
  if (config_.tp_size <= 1) {
    return ForwardOps(num_tokens, num_seqs, num_sample_rows, max_query_len, max_context_len,
                      keep_logits);
  }
  // In a group, once rank 0 has shared a step every rank runs its collectives. A rank whose
  // step fails leaves the others waiting in them, and rank 0 would go on to share the next
  // step while they wait (a collective mismatch): every rank ends instead, saying why.
  absl::Status s = config_.tp_rank == 0 ? ShareStep(num_tokens, num_seqs, num_sample_rows,
                                                    max_query_len, max_context_len)
                                        : absl::OkStatus();
  if (s.ok() && tp_test_fail_step_ > 0 && ++tp_forwards_ == tp_test_fail_step_) {
    s = absl::InternalError("SATURN_TP_TEST_FAIL_STEP: this step fails on purpose (test-only)");
  }
  if (s.ok()) {
    s = ForwardOps(num_tokens, num_seqs, num_sample_rows, max_query_len, max_context_len,
                   keep_logits);
  }
  if (!s.ok()) {
    std::cerr << absl::StrCat("saturn: tensor_parallel rank ", config_.tp_rank, " of ",
                              config_.tp_size, ": a step failed after the ranks started it (",
                              s.message(),
                              "); the other ranks wait in its collectives, so every rank ends "
                              "now\n")
              << std::flush;
    backend_->communicator()->Abort(1);
  }
  return s;
}

absl::Status ModelRunner::ForwardOps(int num_tokens, int num_seqs, int num_sample_rows,
                                     int max_query_len, int max_context_len, bool keep_logits) {
  Buffers& b = *buf_;
  const DeviceWeights& w = *weights_;
  const ModelConfig& m = shard_;  // this rank's heads and SwiGLU width
  const DType dt = backend_->compute_dtype();
  const bool group = config_.tp_size > 1;
  const int64_t T = num_tokens, R = num_sample_rows, d = m.hidden_size,
                hq = int64_t{m.num_heads} * m.head_dim, hkv = int64_t{m.num_kv_heads} * m.head_dim,
                f = m.intermediate_size;
  const InputLayout& in = b.layout;  // set by PrepareInputs for these counts
  const Tensor ids = b.inputs.View(DType::kI32, 1, T, in.ids);
  const Tensor positions = b.inputs.View(DType::kI32, 1, T, in.positions);
  const Tensor slots = b.inputs.View(DType::kI32, 1, T, in.slots);
  const Tensor hidden = b.hidden.View(dt, T, d), normed = b.normed.View(dt, T, d),
               tmp = b.tmp.View(dt, T, d), q = b.q.View(dt, T, hq), k = b.k.View(dt, T, hkv),
               v = b.v.View(dt, T, hkv), attn_out = b.attn_out.View(dt, T, hq),
               gate_up = b.gate_up.View(dt, T, 2 * f), act = b.act.View(dt, T, f);
  AttentionBatch batch;
  batch.query_start = b.inputs.View(DType::kI32, 1, num_seqs + 1, in.query_start);
  batch.context_lens = b.inputs.View(DType::kI32, 1, num_seqs, in.context_lens);
  batch.block_tables = b.inputs.View(DType::kI32, num_seqs, b.max_blocks_per_seq, in.block_tables);
  batch.num_seqs = num_seqs;
  batch.max_query_len = max_query_len;
  batch.max_context_len = max_context_len;
  batch.attended_pairs = b.attended_pairs;
  batch.context_tokens = b.context_tokens;
  batch.prefill = b.h_prefill.data();
  batch.decode_from = b.h_decode_from.data();
  AttentionShape shape;
  shape.num_heads = m.num_heads;
  shape.num_kv_heads = m.num_kv_heads;
  shape.head_dim = m.head_dim;
  shape.block_size = config_.block_size;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));

  RETURN_IF_ERROR(backend_->Embedding(ids, w.embedding_t, hidden));
  if (tp_test_delay_us_ > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(tp_test_delay_us_));
  }
  for (int l = 0; l < m.num_layers; ++l) {
    const DeviceWeights::Layer& L = w.layers[l];
    if (l == 0) {
      RETURN_IF_ERROR(backend_->RmsNorm(hidden, L.attn_norm_t, m.rms_norm_eps, normed));
    } else {  // hidden += previous layer's MLP output
      RETURN_IF_ERROR(backend_->AddRmsNorm(tmp, hidden, L.attn_norm_t, m.rms_norm_eps, normed));
    }
    const Tensor qkv[] = {q, k, v};
    RETURN_IF_ERROR(backend_->GemmSplit(normed, L.wqkv_t, qkv));
    RETURN_IF_ERROR(backend_->RopeKvWrite(q, k, v, positions, m.head_dim, m.Rope(), slots,
                                          b.k_cache[l], b.v_cache[l]));
    RETURN_IF_ERROR(backend_->Attention(q, b.k_cache[l], b.v_cache[l], batch, shape, attn_out));
    RETURN_IF_ERROR(backend_->Gemm(attn_out, L.wo_t, tmp));
    if (group) RETURN_IF_ERROR(backend_->AllReduce(tmp));  // o_proj's partial sums
    RETURN_IF_ERROR(backend_->AddRmsNorm(tmp, hidden, L.mlp_norm_t, m.rms_norm_eps, normed));
    RETURN_IF_ERROR(backend_->GemmSwiGlu(normed, L.w_gate_up_t, gate_up, act));
    RETURN_IF_ERROR(backend_->Gemm(act, L.w_down_t, tmp));
    if (group) RETURN_IF_ERROR(backend_->AllReduce(tmp));  // down_proj's
  }
  if (R == 0) return absl::OkStatus();
  RETURN_IF_ERROR(LogitsOfRows(num_tokens, b.inputs.View(DType::kI32, 1, R, in.sample_rows)));
  if (keep_logits || tp_worker()) return absl::OkStatus();  // rank 0 alone samples
  return SampleRows(num_sample_rows);
}

absl::Status ModelRunner::LogitsOfRows(int num_tokens, const Tensor& rows) {
  Buffers& b = *buf_;
  const DeviceWeights& w = *weights_;
  const ModelConfig& m = shard_;
  const DType dt = backend_->compute_dtype();
  const int64_t R = rows.cols, d = m.hidden_size;
  const Tensor hidden = b.hidden.View(dt, num_tokens, d), tmp = b.tmp.View(dt, num_tokens, d);
  const Tensor gathered = b.gathered.View(dt, R, d),
               gathered_normed = b.gathered_normed.View(dt, R, d);
  const Tensor gathered_tmp = b.gate_up.View(dt, R, d);  // gate_up is free again here
  RETURN_IF_ERROR(backend_->GatherRows(hidden, rows, gathered));
  RETURN_IF_ERROR(backend_->GatherRows(tmp, rows, gathered_tmp));
  RETURN_IF_ERROR(backend_->AddRmsNorm(gathered_tmp, gathered, w.final_norm_t, m.rms_norm_eps,
                                       gathered_normed));
  const Tensor logits = b.logits.View(DType::kF32, R, m.vocab_size);
  if (config_.tp_size == 1) return backend_->Gemm(gathered_normed, w.lm_head_t, logits);
  // Vocabulary-parallel head: each rank's slice of the logits, gathered on rank 0.
  const std::vector<int64_t> counts = VocabCounts(m.vocab_size, config_.tp_size);
  const Tensor part = b.logits_part.View(DType::kF32, R, counts[config_.tp_rank]);
  RETURN_IF_ERROR(backend_->Gemm(gathered_normed, w.lm_head_t, part));
  return backend_->GatherColumns(part, counts, tp_worker() ? part : logits);
}

absl::Status ModelRunner::ShareLogitsRows(int num_tokens, const std::vector<int32_t>& rows) {
  TpHeader h;
  h.kind = static_cast<int64_t>(TpMessage::kLogits);
  h.num_tokens = num_tokens;
  h.sample_rows = static_cast<int64_t>(rows.size());
  h.payload_bytes = static_cast<int64_t>(rows.size() * sizeof(int32_t));
  Communicator* comm = backend_->communicator();
  RETURN_IF_ERROR(comm->Broadcast(&h, sizeof(h), 0));
  std::vector<int32_t> copy = rows;
  return comm->Broadcast(copy.data(), h.payload_bytes, 0);
}

absl::Status ModelRunner::ServeLogits(const TpHeader& h) {
  Buffers& b = *buf_;
  if (!tp_worker() || h.sample_rows < 1 || h.sample_rows > b.max_seqs || h.num_tokens < 1 ||
      h.num_tokens > b.max_tokens ||
      h.payload_bytes != h.sample_rows * static_cast<int64_t>(sizeof(int32_t))) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel: logits of ", h.sample_rows,
                                                   " rows of ", h.num_tokens,
                                                   " exceed this rank's buffers"));
  }
  b.h_logprob_rows.resize(h.sample_rows);
  RETURN_IF_ERROR(backend_->communicator()->Broadcast(b.h_logprob_rows.data(), h.payload_bytes, 0));
  const Tensor idx = b.logprob_rows.View(DType::kI32, 1, h.sample_rows);
  backend_->BeginStep(false);
  RETURN_IF_ERROR(backend_->Upload(b.h_logprob_rows.data(), idx));
  RETURN_IF_ERROR(LogitsOfRows(static_cast<int>(h.num_tokens), idx));
  return backend_->EndStep().status();
}

absl::Status ModelRunner::SampleRows(int num_sample_rows) {
  Buffers& b = *buf_;
  const int64_t R = num_sample_rows;
  if (R == 0) return absl::OkStatus();
  const Tensor logits = b.logits.View(DType::kF32, R, model_.vocab_size);
  const InputLayout& in = b.layout;
  SamplingBatch sp;
  sp.temperature = b.inputs.View(DType::kF32, 1, R, in.temperature);
  sp.top_k = b.inputs.View(DType::kI32, 1, R, in.top_k);
  sp.top_p = b.inputs.View(DType::kF32, 1, R, in.top_p);
  sp.seed = b.inputs.View(DType::kI64, 1, R, in.seed);
  sp.step = b.inputs.View(DType::kI32, 1, R, in.step);
  return backend_->Sample(logits, sp, b.tokens.View(DType::kI32, 1, R));
}

namespace {

bool WantsLogprobs(const StepPlan& plan) {
  for (const ScheduledSeq& s : plan.seqs) {
    if ((s.sample && s.sampling.logprobs >= 0) || !s.prompt_logprob_targets.empty()) return true;
  }
  return false;
}

bool IsUniformDecode(const StepPlan& plan) {
  if (plan.seqs.empty()) return false;
  for (const ScheduledSeq& s : plan.seqs) {
    if (s.num_new_tokens() != 1 || !s.sample) return false;
  }
  return true;
}

}  // namespace

int ModelRunner::GraphSizeFor(int num_seqs) const {
  for (const auto& [size, handle] : graphs_) {
    if (size >= num_seqs) return size;
  }
  return 0;
}

absl::StatusOr<RunnerOutput> ModelRunner::Execute(const StepPlan& plan, bool per_op_timing) {
  RETURN_IF_ERROR(Launch(plan, per_op_timing));
  return Finish(plan);
}

absl::Status ModelRunner::Launch(const StepPlan& plan, bool per_op_timing,
                                 const std::vector<int>& prev_sampled) {
  if (launched_) return absl::FailedPreconditionError("Launch: the previous step is not finished");
  Launched l;
  RunnerOutput& out = l.out;
  const int n = static_cast<int>(plan.seqs.size());
  l.logprobs = WantsLogprobs(plan);
  const int graph_size = use_graphs_ && !l.logprobs && IsUniformDecode(plan) ? GraphSizeFor(n) : 0;
  const double t0 = NowUs();
  backend_->BeginStep(per_op_timing && graph_size == 0);
  if (graph_size > 0) {
    ASSIGN_OR_RETURN(l.rows, PrepareInputs(plan, graph_size, prev_sampled));
    out.prepare_us = NowUs() - t0;
    int handle = -1;
    for (const auto& [size, h] : graphs_) {
      if (size == graph_size) handle = h;
    }
    RETURN_IF_ERROR(backend_->ReplayGraph(handle));
    out.graph_replayed = true;
    out.graph_batch_size = graph_size;
    out.padding_tokens = graph_size - n;
  } else {
    ASSIGN_OR_RETURN(l.rows, PrepareInputs(plan, 0, prev_sampled));
    out.prepare_us = NowUs() - t0;
    int num_tokens, max_query, max_context;
    PlanBounds(plan, &num_tokens, &max_query, &max_context);
    RETURN_IF_ERROR(Forward(num_tokens, n, l.rows, max_query, max_context, l.logprobs));
    if (l.logprobs) RETURN_IF_ERROR(SampleWithLogprobs(plan, l.rows, &out));
  }
  backend_->MarkStepEnd();  // the device span ends with Sample, not with the copy back
  if (l.rows > 0) {
    RETURN_IF_ERROR(
        backend_->DownloadAsync(buf_->tokens.View(DType::kI32, 1, l.rows), buf_->h_tokens.get()));
  }
  launched_ = std::move(l);
  return absl::OkStatus();
}

absl::StatusOr<RunnerOutput> ModelRunner::Finish(const StepPlan& plan) {
  if (!launched_) return absl::FailedPreconditionError("Finish: no step was launched");
  Launched l = std::move(*launched_);
  launched_.reset();
  RunnerOutput& out = l.out;
  const int n = static_cast<int>(plan.seqs.size()), rows = l.rows;
  ASSIGN_OR_RETURN(out.timing, backend_->EndStep());  // waits: the tokens are home after it
  if (config_.tp_size > 1) LogTpStep(out.timing);
  const int32_t* tokens = static_cast<const int32_t*>(buf_->h_tokens.get());
  if (out.graph_replayed) {
    // Captured attention records carry the capture-time cost; restate this step's from its
    // shapes: its n real rows (padding rows attend nothing) over its own contexts.
    cost::AttentionCostShape step;
    step.query_rows = n;
    step.query_cols = int64_t{shard_.num_heads} * shard_.head_dim;
    step.query_dtype = backend_->compute_dtype();
    step.kv_cols = buf_->k_cache[0].cols;
    step.kv_dtype = buf_->k_cache[0].dtype;
    step.attended_pairs = buf_->attended_pairs;
    step.context_tokens = buf_->context_tokens;
    step.num_heads = shard_.num_heads;
    step.head_dim = shard_.head_dim;
    const OpCost attention = cost::Attention(step);
    for (OpRecord& op : out.timing.ops) {
      if (op.kind == OpKind::kAttention) op.cost = attention;
    }
  }
  const int keep = out.graph_replayed ? n : rows;  // padding rows are discarded
  out.sampled.assign(tokens, tokens + std::min(keep, rows));
  if (l.logprobs) {
    // The sampled tokens are known now: their logprobs from the logits kept before sampling.
    const int vocab = model_.vocab_size;
    int row = 0;
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      const ScheduledSeq& s = plan.seqs[i];
      if (!s.sample) continue;
      for (int j = 0; s.sampling.logprobs >= 0 && j <= s.num_draft; ++j) {
        out.logprobs[i].sampled.push_back(ComputeLogprobs(
            &buf_->h_logits[size_t(row + j) * vocab], vocab, tokens[row + j], s.sampling.logprobs));
      }
      row += 1 + s.num_draft;
    }
  }
  return std::move(out);
}

absl::Status ModelRunner::CaptureGraphs() {
  if (!backend_->SupportsGraphs()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda_graphs: the ", backend_->name(), " backend cannot capture graphs"));
  }
  if (!graphs_.empty()) return absl::OkStatus();
  if (launched_) return absl::FailedPreconditionError("CaptureGraphs: a step is launched");
  std::vector<int> sizes;
  for (int s : config_.graph_sizes) {
    if (s >= 1 && s <= buf_->max_seqs) sizes.push_back(s);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const double t0 = NowUs();
  const size_t mem0 = backend_->graph_memory_bytes();
  StepPlan empty;
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {  // largest first
    const int s = *it;
    ASSIGN_OR_RETURN(const int rows, PrepareInputs(empty, s, {}));
    // One eager forward at this size first, so each GEMM shape's first cuBLAS call and each
    // kernel's lazy module load happen outside the capture (PyTorch's practice).
    backend_->BeginStep(false);
    RETURN_IF_ERROR(Forward(s, s, rows, 1, config_.max_model_len, false));
    backend_->MarkStepEnd();
    RETURN_IF_ERROR(backend_->Synchronize());
    RETURN_IF_ERROR(backend_->EndStep().status());
    backend_->BeginStep(false);
    RETURN_IF_ERROR(backend_->BeginGraphCapture());
    absl::Status fwd = Forward(s, s, rows, 1, config_.max_model_len, false);
    if (!fwd.ok()) {
      // A partial graph is never instantiated; the capture's own error, if any, is secondary.
      (void)backend_->AbortGraphCapture();
      (void)backend_->EndStep();
      return fwd;
    }
    ASSIGN_OR_RETURN(const int handle, backend_->EndGraphCapture());
    graphs_.emplace_back(s, handle);
    RETURN_IF_ERROR(backend_->EndStep().status());
  }
  std::sort(graphs_.begin(), graphs_.end());
  graph_info_.sizes = sizes;
  graph_info_.capture_ms = (NowUs() - t0) / 1000.0;
  graph_info_.memory_bytes = backend_->graph_memory_bytes() - mem0;
  return absl::OkStatus();
}

bool ModelRunner::SupportsGraphs() const { return backend_->SupportsGraphs(); }

absl::Status ModelRunner::SetUseGraphs(bool on) {
  if (on && config_.tp_size > 1) {
    return absl::FailedPreconditionError(
        "cuda_graphs: not with tensor_parallel yet (the CPU backend has no graphs, and CUDA "
        "tensor parallelism waits for NCCL)");
  }
  if (on) RETURN_IF_ERROR(CaptureGraphs());
  use_graphs_ = on;
  return absl::OkStatus();
}

}  // namespace saturn
