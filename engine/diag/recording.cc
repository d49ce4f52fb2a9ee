// Recording <-> JSON. Steps are a table (a column list, then one array per step) so a
// 4,096-step window stays a few MB; doubles print in their shortest exact form, so a recording
// read back gives bit-identical reports.
#include "engine/diag/recording.h"

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/json_depth.h"
#include "kernels/tensor.h"
#include "nlohmann/json.hpp"

namespace saturn {
namespace {

using nlohmann::json;

constexpr std::array<std::pair<const char*, double StepRecord::*>, 12> kDoubleCols{{
    {"start_us", &StepRecord::start_us},
    {"end_us", &StepRecord::end_us},
    {"schedule_us", &StepRecord::schedule_us},
    {"prepare_us", &StepRecord::prepare_us},
    {"issue_us", &StepRecord::issue_us},
    {"postprocess_us", &StepRecord::postprocess_us},
    {"hidden_host_us", &StepRecord::hidden_host_us},
    {"device_busy_us", &StepRecord::device_busy_us},
    {"device_span_us", &StepRecord::device_span_us},
    {"gap_us", &StepRecord::gap_us},
    {"sched_run_us", &StepRecord::sched_run_us},
    {"sched_wait_us", &StepRecord::sched_wait_us},
}};
constexpr std::array<std::pair<const char*, int StepRecord::*>, 21> kIntCols{{
    {"op_count", &StepRecord::op_count},
    {"replayed_ops", &StepRecord::replayed_ops},
    {"num_seqs", &StepRecord::num_seqs},
    {"num_prefill_tokens", &StepRecord::num_prefill_tokens},
    {"num_decode_tokens", &StepRecord::num_decode_tokens},
    {"num_sampled", &StepRecord::num_sampled},
    {"num_preempted", &StepRecord::num_preempted},
    {"graph_batch_size", &StepRecord::graph_batch_size},
    {"padding_tokens", &StepRecord::padding_tokens},
    {"queue_depth", &StepRecord::queue_depth},
    {"num_running", &StepRecord::num_running},
    {"kv_blocks_used", &StepRecord::kv_blocks_used},
    {"kv_blocks_free", &StepRecord::kv_blocks_free},
    {"prefix_query_tokens", &StepRecord::prefix_query_tokens},
    {"prefix_hit_tokens", &StepRecord::prefix_hit_tokens},
    {"spec_verify_seqs", &StepRecord::spec_verify_seqs},
    {"spec_draft_tokens", &StepRecord::spec_draft_tokens},
    {"spec_accepted_tokens", &StepRecord::spec_accepted_tokens},
    {"shadow_proposals", &StepRecord::shadow_proposals},
    {"shadow_drafted", &StepRecord::shadow_drafted},
    {"shadow_accepted", &StepRecord::shadow_accepted},
}};
constexpr std::array<std::pair<const char*, bool StepRecord::*>, 3> kBoolCols{{
    {"per_op_timed", &StepRecord::per_op_timed},
    {"sched_known", &StepRecord::sched_known},
    {"graph_replayed", &StepRecord::graph_replayed},
}};
constexpr std::array<const char*, 4> kClassFields{"count", "device_us", "flops", "bytes"};
constexpr size_t kClasses = static_cast<size_t>(OpClass::kCount);

// The comm class (tensor parallelism's collectives) came after the other classes.
constexpr const char* kCommClassColumns = "class5.";
static_assert(static_cast<size_t>(OpClass::kComm) == 5 && kClasses == 6);

// Step columns and sums added since version 1 began: read as 0 (off) from older files.
bool IsLaterField(std::string_view name) {
  for (const char* later : {"prefix_", "spec_", "shadow_", "options.prefix_caching",
                            "options.num_speculative_tokens", kCommClassColumns}) {
    if (name.substr(0, std::string_view(later).size()) == later) return true;
  }
  return name == "hidden_host_us";
}

std::vector<std::string> Columns() {
  std::vector<std::string> c{"step_id", "context_tokens"};
  for (const auto& [name, m] : kDoubleCols) c.push_back(name);
  for (const auto& [name, m] : kIntCols) c.push_back(name);
  for (const auto& [name, m] : kBoolCols) c.push_back(name);
  c.insert(c.end(),
           {"options.max_num_seqs", "options.max_num_batched_tokens", "options.cuda_graphs",
            "options.prefix_caching", "options.num_speculative_tokens"});
  for (size_t k = 0; k < kClasses; ++k) {
    for (const char* f : kClassFields) c.push_back(absl::StrCat("class", k, ".", f));
  }
  return c;
}

json StepRow(const StepRecord& r) {
  json row = json::array({r.step_id, r.context_tokens});
  for (const auto& [name, m] : kDoubleCols) row.push_back(r.*m);
  for (const auto& [name, m] : kIntCols) row.push_back(r.*m);
  for (const auto& [name, m] : kBoolCols) row.push_back(r.*m ? 1 : 0);
  row.push_back(r.options.max_num_seqs);
  row.push_back(r.options.max_num_batched_tokens);
  row.push_back(r.options.cuda_graphs ? 1 : 0);
  row.push_back(r.options.prefix_caching ? 1 : 0);
  row.push_back(r.options.num_speculative_tokens);
  for (const OpClassStats& c : r.by_class) {
    row.push_back(c.count);
    row.push_back(c.device_us);
    row.push_back(c.flops);
    row.push_back(c.bytes);
  }
  return row;
}

StepRecord StepFromRow(const json& row) {
  StepRecord r;
  size_t i = 0;
  r.step_id = row.at(i++).get<int64_t>();
  r.context_tokens = row.at(i++).get<int64_t>();
  for (const auto& [name, m] : kDoubleCols) r.*m = row.at(i++).get<double>();
  for (const auto& [name, m] : kIntCols) r.*m = row.at(i++).get<int>();
  for (const auto& [name, m] : kBoolCols) r.*m = row.at(i++).get<int>() != 0;
  r.options.max_num_seqs = row.at(i++).get<int>();
  r.options.max_num_batched_tokens = row.at(i++).get<int>();
  r.options.cuda_graphs = row.at(i++).get<int>() != 0;
  r.options.prefix_caching = row.at(i++).get<int>() != 0;
  r.options.num_speculative_tokens = row.at(i++).get<int>();
  for (OpClassStats& c : r.by_class) {
    c.count = row.at(i++).get<int>();
    c.device_us = row.at(i++).get<double>();
    c.flops = row.at(i++).get<double>();
    c.bytes = row.at(i++).get<double>();
  }
  return r;
}

json PointsJson(const std::vector<CurvePoint>& pts) {
  json a = json::array();
  for (const CurvePoint& p : pts) {
    a.push_back({p.x, p.us, p.spread, p.samples, p.decode_rows, p.error});
  }
  return a;
}

std::vector<CurvePoint> PointsFrom(const json& a) {
  std::vector<CurvePoint> pts;
  for (const json& p : a) {
    CurvePoint c{p.at(0).get<double>(), p.at(1).get<double>(), p.at(2).get<double>(),
                 p.at(3).get<int>(), p.at(4).get<double>()};
    // Recordings before the mean's error was kept: the spread stands for it, as it did then.
    c.error = p.size() > 5 ? p.at(5).get<double>() : c.spread;
    pts.push_back(c);
  }
  return pts;
}

json CurveJson(const StepCurve& c) {
  return {{"decode", PointsJson(c.decode)},
          {"prefill", PointsJson(c.prefill)},
          {"decode_after_prefill", PointsJson(c.decode_after_prefill)}};
}

StepCurve CurveFrom(const json& j) {
  return StepCurve{PointsFrom(j.at("decode")), PointsFrom(j.at("prefill")),
                   PointsFrom(j.at("decode_after_prefill"))};
}

json ModelJson(const ModelConfig& m) {
  return {{"name", m.name},
          {"vocab_size", m.vocab_size},
          {"hidden_size", m.hidden_size},
          {"intermediate_size", m.intermediate_size},
          {"num_layers", m.num_layers},
          {"num_heads", m.num_heads},
          {"num_kv_heads", m.num_kv_heads},
          {"head_dim", m.head_dim},
          {"max_position_embeddings", m.max_position_embeddings},
          {"tie_word_embeddings", m.tie_word_embeddings}};
}

ModelConfig ModelFrom(const json& j) {
  ModelConfig m;
  m.name = j.at("name").get<std::string>();
  m.vocab_size = j.at("vocab_size").get<int>();
  m.hidden_size = j.at("hidden_size").get<int>();
  m.intermediate_size = j.at("intermediate_size").get<int>();
  m.num_layers = j.at("num_layers").get<int>();
  m.num_heads = j.at("num_heads").get<int>();
  m.num_kv_heads = j.at("num_kv_heads").get<int>();
  m.head_dim = j.at("head_dim").get<int>();
  m.max_position_embeddings = j.at("max_position_embeddings").get<int>();
  m.tie_word_embeddings = j.at("tie_word_embeddings").get<bool>();
  return m;
}

json OptionsJson(const EngineOptions& o) {
  return {{"max_num_seqs", o.max_num_seqs},
          {"max_num_batched_tokens", o.max_num_batched_tokens},
          {"cuda_graphs", o.cuda_graphs},
          {"prefix_caching", o.prefix_caching},
          {"num_speculative_tokens", o.num_speculative_tokens}};
}

EngineOptions OptionsFrom(const json& j) {
  return EngineOptions{j.at("max_num_seqs").get<int>(), j.at("max_num_batched_tokens").get<int>(),
                       j.at("cuda_graphs").get<bool>(), j.value("prefix_caching", false),
                       j.value("num_speculative_tokens", 0)};
}

// A tensor-parallel window's sums (TpStats): the ranks' logs already combined.
json TpJson(const TpStats& t) {
  json ranks = json::array();
  for (const TpRankStats& r : t.per_rank) {
    ranks.push_back({{"step_us", r.step_us},
                     {"comm_us", r.comm_us},
                     {"wait_us", r.wait_us},
                     {"compute_us", r.compute_us},
                     {"run_us", r.run_us},
                     {"sched_wait_us", r.sched_wait_us}});
  }
  return {{"ranks", t.ranks}, {"transport", t.transport},     {"single_host", t.single_host},
          {"steps", t.steps}, {"collectives", t.collectives}, {"transfer_us", t.transfer_us},
          {"per_rank", ranks}};
}

TpStats TpFrom(const json& j) {
  TpStats t;
  t.ranks = j.at("ranks").get<int>();
  t.transport = j.at("transport").get<std::string>();
  t.single_host = j.at("single_host").get<bool>();
  t.steps = j.at("steps").get<int64_t>();
  t.collectives = j.at("collectives").get<int64_t>();
  t.transfer_us = j.at("transfer_us").get<double>();
  for (const json& r : j.at("per_rank")) {
    t.per_rank.push_back({r.at("step_us").get<double>(), r.at("comm_us").get<double>(),
                          r.at("wait_us").get<double>(), r.at("compute_us").get<double>(),
                          r.value("run_us", 0.0), r.value("sched_wait_us", 0.0)});
  }
  return t;
}

// Every field the analyzer reads; the window-edge fields are left out (the session derives
// them from the steps).
json ContextJson(const AnalyzerContext& c) {
  return {{"model", ModelJson(c.model)},
          {"dtype_bytes", c.dtype_bytes},
          {"weight_dtype_bytes", c.weight_dtype_bytes},
          {"kv_dtype_bytes", c.kv_dtype_bytes},
          {"weight_bytes", c.weight_bytes},
          {"kv_num_blocks", c.kv_num_blocks},
          {"kv_block_size", c.kv_block_size},
          {"kv_bytes_per_block", c.kv_bytes_per_block},
          {"max_model_len", c.max_model_len},
          {"options", OptionsJson(c.options)},
          {"max_num_seqs_limit", c.max_num_seqs_limit},
          {"max_num_batched_tokens_limit", c.max_num_batched_tokens_limit},
          {"backend", c.backend},
          {"supports_graphs", c.supports_graphs},
          {"event_thread", c.event_thread},
          {"async_scheduling", c.async_scheduling},
          {"graph_sizes", c.graph_sizes},
          {"graph_memory_bytes", c.graph_memory_bytes},
          {"num_waiting", c.num_waiting},
          {"num_running", c.num_running},
          {"mean_request_tokens", c.mean_request_tokens},
          {"mean_prompt_tokens", c.mean_prompt_tokens},
          {"mean_output_tokens", c.mean_output_tokens},
          {"additive_roofline", c.additive_roofline},
          {"probe_curve", CurveJson(c.probe_curve)},
          {"probe_context", c.probe_context},
          {"probe_context_slopes", PointsJson(c.probe_context_slopes)},
          {"probe_graphs", c.probe_graphs},
          {"probe_sampling", PointsJson(c.probe_sampling)},
          {"probe_curve_other_graphs", CurveJson(c.probe_curve_other_graphs)},
          {"tpot_slo_ms", c.tpot_slo_ms},
          {"tensor_parallel", TpJson(c.tp)},
          {"run_share", c.run_share}};
}

AnalyzerContext ContextFrom(const json& j) {
  AnalyzerContext c;
  c.model = ModelFrom(j.at("model"));
  c.dtype_bytes = j.at("dtype_bytes").get<double>();
  c.weight_dtype_bytes = j.at("weight_dtype_bytes").get<double>();
  c.kv_dtype_bytes = j.at("kv_dtype_bytes").get<double>();
  c.weight_bytes = j.at("weight_bytes").get<double>();
  c.kv_num_blocks = j.at("kv_num_blocks").get<int>();
  c.kv_block_size = j.at("kv_block_size").get<int>();
  c.kv_bytes_per_block = j.at("kv_bytes_per_block").get<double>();
  c.max_model_len = j.at("max_model_len").get<int>();
  c.options = OptionsFrom(j.at("options"));
  c.max_num_seqs_limit = j.at("max_num_seqs_limit").get<int>();
  c.max_num_batched_tokens_limit = j.at("max_num_batched_tokens_limit").get<int>();
  c.backend = j.at("backend").get<std::string>();
  c.supports_graphs = j.at("supports_graphs").get<bool>();
  c.event_thread = j.value("event_thread", false);  // recordings before it: on the engine thread
  c.async_scheduling = j.value("async_scheduling", false);
  c.graph_sizes = j.at("graph_sizes").get<std::vector<int>>();
  c.graph_memory_bytes = j.at("graph_memory_bytes").get<double>();
  c.num_waiting = j.at("num_waiting").get<int>();
  c.num_running = j.at("num_running").get<int>();
  c.mean_request_tokens = j.at("mean_request_tokens").get<double>();
  c.mean_prompt_tokens = j.at("mean_prompt_tokens").get<double>();
  c.mean_output_tokens = j.at("mean_output_tokens").get<double>();
  c.additive_roofline = j.at("additive_roofline").get<int>();
  c.probe_curve = CurveFrom(j.at("probe_curve"));
  c.probe_context = j.at("probe_context").get<double>();
  c.probe_context_slopes = PointsFrom(j.at("probe_context_slopes"));
  c.probe_graphs = j.at("probe_graphs").get<bool>();
  // Recordings before it was kept have none: no sampling gap is added for them.
  if (j.contains("probe_sampling")) c.probe_sampling = PointsFrom(j.at("probe_sampling"));
  c.probe_curve_other_graphs = CurveFrom(j.at("probe_curve_other_graphs"));
  c.tpot_slo_ms = j.at("tpot_slo_ms").get<double>();
  c.run_share = j.at("run_share").get<double>();
  // Recordings from before tensor parallelism: none.
  if (j.contains("tensor_parallel")) c.tp = TpFrom(j.at("tensor_parallel"));
  return c;
}

// StepSums as a JSON object, one key per field.
constexpr std::pair<const char*, double StepSums::*> kSumDoubles[] = {
    {"first_start_us", &StepSums::first_start_us},
    {"last_end_us", &StepSums::last_end_us},
    {"last_wall_us", &StepSums::last_wall_us},
    {"wall_us", &StepSums::wall_us},
    {"device_busy_us", &StepSums::device_busy_us},
    {"device_busy_in_wall_us", &StepSums::device_busy_in_wall_us},
    {"schedule_us", &StepSums::schedule_us},
    {"prepare_us", &StepSums::prepare_us},
    {"postprocess_us", &StepSums::postprocess_us},
    {"hidden_host_us", &StepSums::hidden_host_us},
    {"loop_gap_us", &StepSums::loop_gap_us},
    {"lead_gap_us", &StepSums::lead_gap_us},
    {"sched_run_us", &StepSums::sched_run_us},
    {"sched_wait_us", &StepSums::sched_wait_us},
    {"prefill_tokens", &StepSums::prefill_tokens},
    {"decode_tokens", &StepSums::decode_tokens},
    {"sampled", &StepSums::sampled},
    {"seqs", &StepSums::seqs},
    {"queue_depth", &StepSums::queue_depth},
    {"running", &StepSums::running},
    {"kv_usage", &StepSums::kv_usage},
    {"kv_usage_max", &StepSums::kv_usage_max},
    {"prefix_query_tokens", &StepSums::prefix_query_tokens},
    {"prefix_hit_tokens", &StepSums::prefix_hit_tokens},
    {"prefix_missed_query_tokens", &StepSums::prefix_missed_query_tokens},
    {"prefix_missed_tokens", &StepSums::prefix_missed_tokens},
    {"spec_verify_seqs", &StepSums::spec_verify_seqs},
    {"spec_draft_tokens", &StepSums::spec_draft_tokens},
    {"spec_accepted_tokens", &StepSums::spec_accepted_tokens},
    {"shadow_proposals", &StepSums::shadow_proposals},
    {"shadow_drafted", &StepSums::shadow_drafted},
    {"shadow_accepted", &StepSums::shadow_accepted},
    {"decode_wall_us", &StepSums::decode_wall_us},
    {"decode_seqs", &StepSums::decode_seqs},
    {"decode_context", &StepSums::decode_context},
    {"padding_tokens", &StepSums::padding_tokens},
    {"replay_rows", &StepSums::replay_rows},
    {"timed_wall_us", &StepSums::timed_wall_us},
};
constexpr std::pair<const char*, int64_t StepSums::*> kSumCounts[] = {
    {"steps", &StepSums::steps},
    {"issued_ops", &StepSums::issued_ops},
    {"replay_steps", &StepSums::replay_steps},
    {"preemptions", &StepSums::preemptions},
    {"decode_steps", &StepSums::decode_steps},
    {"replayed_decode_steps", &StepSums::replayed_decode_steps},
    {"timed_steps", &StepSums::timed_steps},
};

json SumsJson(const EvictedSums& e) {
  const StepSums& s = e.sums;
  json j = {{"begin_us", e.begin_us},
            {"complete", e.complete},
            {"any_graph_replayed", s.any_graph_replayed},
            {"max_queue_depth", s.max_queue_depth}};
  for (const auto& [name, field] : kSumDoubles) j[name] = s.*field;
  for (const auto& [name, field] : kSumCounts) j[name] = s.*field;
  json classes = json::array();
  for (const StepSums::Class& c : s.by_class) {
    classes.push_back({{"flops", c.flops},
                       {"bytes", c.bytes},
                       {"timed_us", c.timed_us},
                       {"timed_flops", c.timed_flops},
                       {"timed_bytes", c.timed_bytes},
                       {"max_count", c.max_count}});
  }
  j["by_class"] = std::move(classes);
  return j;
}

EvictedSums SumsFrom(const json& j) {
  EvictedSums e;
  StepSums& s = e.sums;
  e.begin_us = j.at("begin_us").get<double>();
  e.complete = j.at("complete").get<bool>();
  s.any_graph_replayed = j.at("any_graph_replayed").get<bool>();
  s.max_queue_depth = j.at("max_queue_depth").get<int>();
  for (const auto& [name, field] : kSumDoubles) {  // later fields: 0 in older files
    s.*field = IsLaterField(name) ? j.value(name, 0.0) : j.at(name).get<double>();
  }
  for (const auto& [name, field] : kSumCounts) s.*field = j.at(name).get<int64_t>();
  const json& classes = j.at("by_class");
  // One entry per op class; files from before the comm class end at the one before it.
  if (!classes.is_array() || (classes.size() != s.by_class.size() &&
                              classes.size() != static_cast<size_t>(OpClass::kComm))) {
    throw json::other_error::create(
        501, "\"earlier\".\"by_class\" must hold one entry per op class", &classes);
  }
  for (size_t c = 0; c < classes.size(); ++c) {
    const json& k = classes[c];
    StepSums::Class& o = s.by_class[c];
    o.flops = k.at("flops").get<double>();
    o.bytes = k.at("bytes").get<double>();
    o.timed_us = k.at("timed_us").get<double>();
    o.timed_flops = k.at("timed_flops").get<double>();
    o.timed_bytes = k.at("timed_bytes").get<double>();
    o.max_count = k.at("max_count").get<int>();
  }
  return e;
}

}  // namespace

std::vector<StepRecord> WindowInput::Since(double since_us) const {
  std::vector<StepRecord> out;
  for (const StepRecord& r : steps) {
    if (r.start_us >= since_us) out.push_back(r);
  }
  return out;
}

std::vector<StepRecord> WindowInput::Last(size_t n) const {
  const size_t k = std::min(n, steps.size());
  return std::vector<StepRecord>(steps.end() - static_cast<std::ptrdiff_t>(k), steps.end());
}

std::string RecordingToJson(const Recording& r) {
  const WindowInput& in = r.input;
  json steps = json::array();
  for (const StepRecord& s : in.steps) steps.push_back(StepRow(s));
  json j = {{"format", "saturn-recording"},
            {"version", Recording::kVersion},
            {"device", r.device},
            {"bottleneck", r.bottleneck},
            {"top_action", r.top_action},
            {"nvml_percent", r.nvml_percent},
            {"calibration", json::parse(CalibrationToJson(r.calibration))},
            {"begin_us", in.begin_us},
            {"end_us", in.end_us},
            {"ring_total_steps", in.ring_total_steps},
            {"ring_capacity", in.ring_capacity},
            {"in_flight_since_us", in.in_flight_since_us},
            {"earlier", SumsJson(in.earlier)},
            {"context", ContextJson(in.context)},
            {"step_columns", Columns()},
            {"steps", std::move(steps)}};
  return j.dump();
}

absl::StatusOr<Recording> RecordingFromJson(std::string_view text) {
  if (absl::Status s = CheckJsonDepth(text, kMaxFileJsonDepth, "recording"); !s.ok()) return s;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("recording: not a JSON object");
  }
  if (!j.contains("format") || !j["format"].is_string() || j["format"] != "saturn-recording") {
    return absl::InvalidArgumentError(
        "recording: \"format\" is not \"saturn-recording\" (not a saturn-diag record file)");
  }
  Recording r;
  std::string where;  // the field being read, named in a type or range error
  try {
    where = "\"version\"";
    const int version = j.at("version").get<int>();
    if (version != Recording::kVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("recording: \"version\" ", version, " is not ", Recording::kVersion));
    }
    // Columns added since version 1 began may be missing from older files: read as 0.
    where = "\"step_columns\"";
    const std::vector<std::string> want = Columns(),
                                   have = j.at("step_columns").get<std::vector<std::string>>();
    std::vector<int> from;  // for each column of this build, its index in the file's rows
    for (const std::string& c : want) {
      const auto at = std::find(have.begin(), have.end(), c);
      if (at == have.end() && !IsLaterField(c)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "recording: \"step_columns\" differ from this build's step record (no \"", c, "\")"));
      }
      from.push_back(at == have.end() ? -1 : static_cast<int>(at - have.begin()));
    }
    if (have.size() > want.size() - std::count(from.begin(), from.end(), -1)) {
      return absl::InvalidArgumentError(
          "recording: \"step_columns\" differ from this build's step record");
    }
    where = "\"device\"";
    r.device = j.at("device").get<std::string>();
    where = "\"bottleneck\", \"top_action\" or \"nvml_percent\"";
    r.bottleneck = j.at("bottleneck").get<std::string>();
    r.top_action = j.at("top_action").get<std::string>();
    r.nvml_percent = j.at("nvml_percent").get<double>();
    absl::StatusOr<Calibration> cal = CalibrationFromJson(j.at("calibration").dump());
    if (!cal.ok()) return cal.status();
    r.calibration = std::move(*cal);
    WindowInput& in = r.input;
    where =
        "\"begin_us\", \"end_us\", \"ring_total_steps\", \"ring_capacity\" or "
        "\"in_flight_since_us\"";
    in.begin_us = j.at("begin_us").get<double>();
    in.end_us = j.at("end_us").get<double>();
    in.ring_total_steps = j.at("ring_total_steps").get<int64_t>();
    in.ring_capacity = j.at("ring_capacity").get<size_t>();
    in.in_flight_since_us = j.at("in_flight_since_us").get<double>();
    // Recordings from before the ring kept per-second sums have none.
    where = "\"earlier\"";
    if (j.contains("earlier")) in.earlier = SumsFrom(j.at("earlier"));
    where = "\"context\"";
    in.context = ContextFrom(j.at("context"));
    where = "\"steps\"";
    for (const json& row : j.at("steps")) {
      where = absl::StrCat("\"steps\" row ", in.steps.size());
      json ours = json::array();
      for (int f : from) ours.push_back(f < 0 ? json(0.0) : row.at(static_cast<size_t>(f)));
      in.steps.push_back(StepFromRow(ours));
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("recording: ", where, ": ", JsonExceptionText(e)));
  }
  if (!(r.input.end_us > r.input.begin_us)) {
    return absl::InvalidArgumentError("recording: \"end_us\" must be after \"begin_us\"");
  }
  // Element sizes the cost model knows (f32 4, bf16/f16 2; 0: as the compute dtype; GEMM
  // weights also q8_0's 1.0625 and q4_0's 0.5625).
  const AnalyzerContext& c = r.input.context;
  for (const auto& [name, bytes, weights] :
       {std::tuple{"dtype_bytes", c.dtype_bytes, false},
        std::tuple{"weight_dtype_bytes", c.weight_dtype_bytes, true},
        std::tuple{"kv_dtype_bytes", c.kv_dtype_bytes, true}}) {
    const bool block = std::string_view(name) == "weight_dtype_bytes" &&
                       (bytes == DTypeBytesPerElement(DType::kQ8_0) ||
                        bytes == DTypeBytesPerElement(DType::kQ4_0));
    if (!(bytes == 2 || bytes == 4 || block || (weights && bytes == 0))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recording: context.", name, " is ", bytes, "; an element is 2 or 4 bytes",
          weights ? " (0: the compute dtype's)" : "",
          std::string_view(name) == "weight_dtype_bytes" ? ", or 1.0625 (q8_0) or 0.5625 (q4_0)"
                                                         : ""));
    }
  }
  for (size_t i = 1; i < r.input.steps.size(); ++i) {
    if (r.input.steps[i].start_us < r.input.steps[i - 1].start_us) {
      return absl::InvalidArgumentError(
          absl::StrCat("recording: \"steps\" out of order at row ", i, " (start_us falls)"));
    }
  }
  return r;
}

}  // namespace saturn
