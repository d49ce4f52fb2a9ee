// The engine's structs -> saturn.v1 messages for the Saturn service's replies, and the
// options update's merge.
#include "server/grpc/proto_convert.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/base/enum_table.h"

namespace saturn {

v1::FinishReason ToProto(FinishReason reason) {
  static constexpr std::array kProto{v1::FINISH_REASON_UNSPECIFIED, v1::FINISH_REASON_LENGTH,
                                     v1::FINISH_REASON_STOP, v1::FINISH_REASON_CANCELLED,
                                     v1::FINISH_REASON_ERROR};  // FinishReason's order
  return EnumLookup(kProto, reason, v1::FINISH_REASON_UNSPECIFIED);
}

void ToProto(const EngineOptions& options, v1::EngineOptions* out) {
  out->set_max_num_seqs(options.max_num_seqs);
  out->set_max_num_batched_tokens(options.max_num_batched_tokens);
  out->set_cuda_graphs(options.cuda_graphs);
  out->set_prefix_caching(options.prefix_caching);
  out->set_num_speculative_tokens(options.num_speculative_tokens);
}

void ToProto(const Usage& usage, v1::Usage* out) {
  out->set_prompt_tokens(usage.prompt_tokens);
  out->set_completion_tokens(usage.completion_tokens);
  out->set_num_preemptions(usage.num_preemptions);
}

void ToProto(const PositionLogprobs& logprobs, v1::PositionLogprobs* out) {
  auto fill = [](const TokenLogprob& t, v1::TokenLogprob* o) {
    o->set_token_id(t.token_id);
    o->set_logprob(t.logprob);
    o->set_rank(t.rank);
  };
  fill(logprobs.token, out->mutable_token());
  for (const TokenLogprob& t : logprobs.top) fill(t, out->add_top());
}

void ToProto(const RequestTimings& t, v1::RequestTimings* out) {
  // A duration whose end did not happen (e.g. no token before a cancel) is reported as 0.
  auto span = [](double from, double to) -> int64_t {
    return from > 0 && to >= from ? static_cast<int64_t>(to - from) : 0;
  };
  out->set_queue_time_us(span(t.arrival_us, t.first_scheduled_us));
  out->set_time_to_first_token_us(span(t.arrival_us, t.first_token_us));
  out->set_decode_time_us(span(t.first_token_us, t.finished_us));
  out->set_e2e_time_us(span(t.arrival_us, t.finished_us));
  out->set_arrival_us(static_cast<int64_t>(t.arrival_us));
  out->set_first_scheduled_us(static_cast<int64_t>(t.first_scheduled_us));
  out->set_first_token_us(static_cast<int64_t>(t.first_token_us));
  out->set_finished_us(static_cast<int64_t>(t.finished_us));
}

EngineOptions MergeOptions(const EngineOptions& current,
                           const v1::UpdateEngineOptionsRequest& req) {
  EngineOptions o = current;
  if (req.has_max_num_seqs()) o.max_num_seqs = req.max_num_seqs();
  if (req.has_max_num_batched_tokens()) o.max_num_batched_tokens = req.max_num_batched_tokens();
  if (req.has_cuda_graphs()) o.cuda_graphs = req.cuda_graphs();
  if (req.has_prefix_caching()) o.prefix_caching = req.prefix_caching();
  if (req.has_num_speculative_tokens()) o.num_speculative_tokens = req.num_speculative_tokens();
  return o;
}

void FillServerInfo(const Engine& engine, const PromptLimits& limits,
                    const std::string& listen_address, v1::ServerInfo* out) {
  const EngineInfo info = engine.info();
  const ModelConfig& m = info.model;
  v1::ModelInfo* mi = out->mutable_model();
  mi->set_name(m.name);
  mi->set_vocab_size(m.vocab_size);
  mi->set_hidden_size(m.hidden_size);
  mi->set_intermediate_size(m.intermediate_size);
  mi->set_num_layers(m.num_layers);
  mi->set_num_heads(m.num_heads);
  mi->set_num_kv_heads(m.num_kv_heads);
  mi->set_head_dim(m.head_dim);
  mi->set_max_position_embeddings(m.max_position_embeddings);
  mi->set_rms_norm_eps(m.rms_norm_eps);
  mi->set_rope_theta(m.rope_theta);
  mi->set_tie_word_embeddings(m.tie_word_embeddings);
  mi->set_bos_token_id(m.bos_token_id);
  mi->set_eos_token_id(m.eos_token_id);
  mi->set_num_parameters(m.NumParameters());
  mi->set_weight_bytes(static_cast<int64_t>(info.weight_bytes));
  mi->set_has_text_tokenizer(limits.has_text_tokenizer());
  mi->set_tokenizer(limits.has_text_tokenizer() ? limits.tokenizer->kind() : "");

  v1::BackendInfo* bi = out->mutable_backend();
  bi->set_name(info.backend);
  bi->set_device_name(info.device_name);
  bi->set_compute_dtype(DTypeName(info.compute_dtype));
  bi->set_device_memory_bytes(static_cast<int64_t>(info.device_memory_bytes));
  bi->set_supports_cuda_graphs(info.supports_graphs);
  bi->set_event_threads(info.event_threads);
  bi->set_async_scheduling(info.async_scheduling);
  bi->set_tensor_parallel(info.tensor_parallel);
  bi->set_tensor_parallel_transport(info.tp_transport);

  ToProto(engine.options(), out->mutable_options());

  const ModelLimits& ml = info.limits;
  v1::EngineLimits* li = out->mutable_limits();
  li->set_max_num_seqs_limit(info.max_num_seqs_limit);
  li->set_max_num_batched_tokens_limit(info.max_num_batched_tokens_limit);
  li->set_max_model_len(ml.max_model_len);
  li->set_max_queued_requests(info.max_queued_requests);
  li->set_max_prompt_text_bytes(limits.max_prompt_text_bytes());

  const KvStats& kv = info.kv;
  v1::KvCacheInfo* ki = out->mutable_kv_cache();
  ki->set_block_size(kv.block_size);
  ki->set_num_blocks(kv.num_blocks);
  ki->set_blocks_free(kv.blocks_free);
  ki->set_bytes_per_block(static_cast<int64_t>(kv.bytes_per_block));
  ki->set_capacity_bytes(static_cast<int64_t>(kv.capacity_bytes));
  ki->set_max_model_len(ml.max_model_len);
  ki->set_dtype(DTypeName(kv.dtype));

  out->set_listen_address(listen_address);
  const EngineCounters counters = engine.counters();
  out->set_num_waiting(counters.num_waiting);
  out->set_num_running(counters.num_running);
}

}  // namespace saturn
