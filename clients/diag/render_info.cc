// saturn-diag info's page (see render_info.h): model, backend and device, options and their
// limits, KV capacity, calibration, and whatever later ServerInfo fields the server sends
// (graphs, ...), printed generically so that an older client still shows them.
#include "clients/diag/render_info.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "proto/render/report_text.h"

namespace saturn::clients {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Fields of ServerInfo this page does not name (numbers 11 and up are left for later issues),
// each printed as the JSON of a copy that holds only it.
void ExtraFields(const v1::ServerInfo& info, std::string* out) {
  const google::protobuf::Reflection* refl = v1::ServerInfo::GetReflection();
  const google::protobuf::Descriptor* d = v1::ServerInfo::GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->number() < 11) continue;
    if (f->is_repeated() ? refl->FieldSize(info, f) == 0 : !refl->HasField(info, f)) continue;
    v1::ServerInfo only = info;
    for (int j = 0; j < d->field_count(); ++j) {
      if (j != i) refl->ClearField(&only, d->field(j));
    }
    google::protobuf::util::JsonPrintOptions o;
    o.preserve_proto_field_names = true;
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(only, &json, o).ok()) continue;
    absl::StrAppendFormat(out, "%-12s %s\n", f->name(), json);
  }
}

}  // namespace

std::string RenderCalibration(const v1::Calibration& c) {
  std::string out;
  absl::StrAppendFormat(&out, "%-12s %s on %s (%s), source: %s\n", "calibration", c.backend(),
                        c.device(), c.dtype(), c.source().empty() ? "measured" : c.source());
  absl::StrAppendFormat(&out, "%-12s peak GEMM  %s   (%s)\n", "",
                        FormatSi(c.gemm_flops_per_s(), "FLOP/s"), c.gemm_method());
  absl::StrAppendFormat(&out, "%-12s bandwidth  %s   (%s)\n", "",
                        FormatSi(c.bandwidth_bytes_per_s(), "B/s"), c.bandwidth_method());
  absl::StrAppendFormat(&out, "%-12s per op     %.2f us dispatch, %.2f us issue   (%s)\n", "",
                        c.op_dispatch_us(), c.op_issue_us(), c.dispatch_method());
  if (c.graph_launch_us() > 0) {
    absl::StrAppendFormat(&out, "%-12s per graph  %.2f us launch (one replay, however many ops)\n",
                          "", c.graph_launch_us());
  }
  absl::StrAppendFormat(&out, "%-12s ridge      %.2f FLOP/byte\n", "", c.ridge_flops_per_byte());
  if (c.spec_flops_per_s() > 0 || c.spec_bandwidth_bytes_per_s() > 0) {
    absl::StrAppendFormat(&out, "%-12s spec       %s, %s   (%s)\n", "",
                          FormatSi(c.spec_flops_per_s(), "FLOP/s"),
                          FormatSi(c.spec_bandwidth_bytes_per_s(), "B/s"), c.spec_method());
  }
  if (c.age_s() >= 0 || c.suspect() || !c.stable()) {
    absl::StrAppendFormat(
        &out, "%-12s state      %s%s%s\n", "",
        c.age_s() >= 0 ? absl::StrFormat("measured %.0f s ago", c.age_s())
                       : std::string("age unknown"),
        c.stable() ? "" : "; trials did NOT agree (busy machine)",
        c.suspect() ? absl::StrCat("; SUSPECT: ", c.suspect_reason(), " (saturn-diag recalibrate)")
                    : std::string());
  }
  return out;
}

std::string RenderInfo(const v1::ServerInfo& info, const v1::Calibration* calibration,
                       const std::string& calibration_note) {
  const v1::ModelInfo& m = info.model();
  const v1::BackendInfo& b = info.backend();
  const v1::EngineOptions& o = info.options();
  const v1::EngineLimits& l = info.limits();
  const v1::KvCacheInfo& kv = info.kv_cache();
  std::string out;
  absl::StrAppendFormat(&out, "%-12s %s\n", "server", info.listen_address());
  absl::StrAppendFormat(&out,
                        "%-12s %s: %d layers, hidden %d, heads %d (kv %d) x %d, vocab %d, "
                        "%s params, %.1f MiB of weights\n",
                        "model", m.name(), m.num_layers(), m.hidden_size(), m.num_heads(),
                        m.num_kv_heads(), m.head_dim(), m.vocab_size(),
                        FormatSi(static_cast<double>(m.num_parameters()), ""),
                        m.weight_bytes() / kMiB);
  absl::StrAppendFormat(
      &out, "%-12s %s on %s, %s, %.0f MiB usable, CUDA graphs %s, token events on %s%s\n",
      "backend", b.name(), b.device_name(), b.compute_dtype(), b.device_memory_bytes() / kMiB,
      b.supports_cuda_graphs() ? "supported" : "not supported",
      b.event_threads() > 0 ? absl::StrCat(b.event_threads(), " event thread(s)")
                            : "the engine thread",
      b.async_scheduling() ? ", steps overlapped (async scheduling)" : "");
  if (b.tensor_parallel() > 1) {
    absl::StrAppendFormat(&out,
                          "%-12s %d ranks over %s; the weights above are rank 0's share (its "
                          "layers' slice and its slice of the LM head, the embedding whole)\n",
                          "tensor par.", b.tensor_parallel(), b.tensor_parallel_transport());
  }
  absl::StrAppendFormat(&out,
                        "%-12s max_num_seqs %d (limit %d), max_num_batched_tokens %d (limit %d), "
                        "cuda_graphs %s\n",
                        "options", o.max_num_seqs(), l.max_num_seqs_limit(),
                        o.max_num_batched_tokens(), l.max_num_batched_tokens_limit(),
                        o.cuda_graphs() ? "on" : "off");
  absl::StrAppendFormat(
      &out, "%-12s max_model_len %d, max_queued_requests %d, max prompt text %d bytes\n", "limits",
      l.max_model_len(), l.max_queued_requests(), l.max_prompt_text_bytes());
  const int per_seq = kv.block_size() > 0 && l.max_model_len() > 0
                          ? (l.max_model_len() + kv.block_size() - 1) / kv.block_size()
                          : 0;
  absl::StrAppendFormat(&out,
                        "%-12s %d blocks x %d tokens (%d free), %s, %.1f MiB; %d full-length "
                        "sequences fit\n",
                        "kv cache", kv.num_blocks(), kv.block_size(), kv.blocks_free(),
                        kv.dtype().empty() ? "dtype unknown" : kv.dtype(),
                        kv.capacity_bytes() / kMiB, per_seq > 0 ? kv.num_blocks() / per_seq : 0);
  absl::StrAppendFormat(&out, "%-12s %d waiting, %d running\n", "requests", info.num_waiting(),
                        info.num_running());
  if (calibration != nullptr) {
    out += RenderCalibration(*calibration);
  } else {
    absl::StrAppendFormat(&out, "%-12s not available: %s\n", "calibration", calibration_note);
  }
  const v1::CudaGraphInfo& g = info.cuda_graphs();
  if (g.captured_sizes().empty()) {
    absl::StrAppendFormat(&out, "%-12s none captured\n", "graphs");
  } else {
    absl::StrAppendFormat(&out, "%-12s decode batch sizes %s captured in %.1f ms, %.1f MiB\n",
                          "graphs", absl::StrJoin(g.captured_sizes(), ","), g.capture_ms(),
                          g.memory_bytes() / kMiB);
  }
  ExtraFields(info, &out);
  return out;
}

}  // namespace saturn::clients
