// Tensor-parallel sessions (tp_worker.h).
#include "engine/tp/tp_worker.h"

#include <iostream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/weights.h"
#include "engine/tp/tp_protocol.h"
#include "engine/tp/tp_shard.h"
#include "kernels/backend.h"
#include "kernels/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace saturn {
namespace {

using json = nlohmann::json;

std::string ToJson(const TpStartConfig& c) {
  const RunnerConfig& r = c.runner;
  return json{{"model", c.model},
              {"weight_seed", c.weight_seed},
              {"backend", c.backend},
              {"weight_dtype", c.weight_dtype},
              {"kv_cache_dtype", c.kv_cache_dtype},
              {"batch_invariant", c.batch_invariant},
              {"cuda_kernels", c.cuda_kernels},
              {"num_threads", c.num_threads},
              {"max_num_seqs_limit", r.max_num_seqs_limit},
              {"max_num_batched_tokens_limit", r.max_num_batched_tokens_limit},
              {"max_model_len", r.max_model_len},
              {"block_size", r.block_size},
              {"num_kv_blocks", r.num_kv_blocks},
              {"graph_sizes", r.graph_sizes},
              {"tp_size", r.tp_size},
              {"test_delay_us", c.test_delay_us}}
      .dump();
}

absl::StatusOr<TpStartConfig> FromJson(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InternalError("tensor_parallel: rank 0's start message is not a JSON object");
  }
  TpStartConfig c;
  try {
    c.model = j.at("model").get<std::string>();
    c.weight_seed = j.at("weight_seed").get<uint64_t>();
    c.backend = j.at("backend").get<std::string>();
    c.weight_dtype = j.at("weight_dtype").get<std::string>();
    c.kv_cache_dtype = j.at("kv_cache_dtype").get<std::string>();
    c.batch_invariant = j.at("batch_invariant").get<std::string>();
    c.cuda_kernels = j.at("cuda_kernels").get<std::string>();
    c.num_threads = j.at("num_threads").get<int>();
    RunnerConfig& r = c.runner;
    r.max_num_seqs_limit = j.at("max_num_seqs_limit").get<int>();
    r.max_num_batched_tokens_limit = j.at("max_num_batched_tokens_limit").get<int>();
    r.max_model_len = j.at("max_model_len").get<int>();
    r.block_size = j.at("block_size").get<int>();
    r.num_kv_blocks = j.at("num_kv_blocks").get<int>();
    r.graph_sizes = j.at("graph_sizes").get<std::vector<int>>();
    r.tp_size = j.at("tp_size").get<int>();
    c.test_delay_us = j.at("test_delay_us").get<int64_t>();
  } catch (const json::exception& e) {
    return absl::InternalError(absl::StrCat("tensor_parallel: rank 0's start message: ", e.what()));
  }
  return c;
}

// One rank's shard: its backend (with the group) and runner.
struct Shard {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModelRunner> runner;
};

absl::StatusOr<Shard> LoadShard(Communicator* comm, const TpStartConfig& c) {
  Shard s;
  ASSIGN_OR_RETURN(s.backend, CreateBackend(c.backend, c.num_threads, c.weight_dtype,
                                            c.kv_cache_dtype, c.batch_invariant, c.cuda_kernels));
  s.backend->SetCommunicator(comm);
  ASSIGN_OR_RETURN(ModelWeights full, LoadModel(c.model, c.weight_seed));
  ASSIGN_OR_RETURN(ModelWeights mine, ShardWeights(std::move(full), comm->rank(), comm->size()));
  RunnerConfig rc = c.runner;
  rc.tp_rank = comm->rank();
  ASSIGN_OR_RETURN(s.runner, ModelRunner::Create(s.backend.get(), mine, rc));
  if (comm->rank() == 1) s.runner->set_tp_test_delay_us(c.test_delay_us);
  return s;
}

absl::StatusOr<TpHeader> ReceiveHeader(Communicator* comm) {
  TpHeader h;
  RETURN_IF_ERROR(comm->Broadcast(&h, sizeof(h), 0));
  return h;
}

}  // namespace

absl::Status SendTpStart(Communicator* comm, const TpStartConfig& config) {
  const std::string payload = ToJson(config);
  TpHeader h;
  h.kind = static_cast<int64_t>(TpMessage::kStart);
  h.payload_bytes = static_cast<int64_t>(payload.size());
  RETURN_IF_ERROR(comm->Broadcast(&h, sizeof(h), 0));
  std::string copy = payload;
  return comm->Broadcast(copy.data(), copy.size(), 0);
}

absl::Status AgreeTpStart(Communicator* comm, const absl::Status& mine) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> ready, comm->AllGather(mine.ok() ? 0 : 1));
  if (!mine.ok()) return mine;
  for (size_t r = 0; r < ready.size(); ++r) {
    if (ready[r] != 0) {
      return absl::UnavailableError(absl::StrCat("tensor_parallel: rank ", r,
                                                 " could not load its shard (its log says why)"));
    }
  }
  return absl::OkStatus();
}

absl::Status SendTpExit(Communicator* comm) {
  TpHeader h;
  h.kind = static_cast<int64_t>(TpMessage::kExit);
  return comm->Broadcast(&h, sizeof(h), 0);
}

absl::Status RunTpWorker(Communicator* comm, const std::string& log_prefix) {
  std::unique_ptr<Shard> shard;
  for (;;) {
    ASSIGN_OR_RETURN(const TpHeader h, ReceiveHeader(comm));
    switch (static_cast<TpMessage>(h.kind)) {
      case TpMessage::kStart: {
        shard.reset();
        std::string text(static_cast<size_t>(h.payload_bytes), '\0');
        RETURN_IF_ERROR(comm->Broadcast(text.data(), text.size(), 0));
        absl::StatusOr<TpStartConfig> config = FromJson(text);
        absl::StatusOr<Shard> loaded =
            config.ok() ? LoadShard(comm, *config) : absl::StatusOr<Shard>(config.status());
        // One write a line: under a launcher, ranks' lines interleave at each write.
        std::string line;
        if (!loaded.ok()) {
          line = absl::StrCat(log_prefix, "cannot load its shard: ", loaded.status().message());
        } else {
          shard = std::make_unique<Shard>(std::move(*loaded));
          line = absl::StrCat(log_prefix, "shard ", comm->rank(), " of ", comm->size(), " of ",
                              config->model, ": ", shard->runner->weight_bytes() >> 20,
                              " MiB of weights, ", shard->runner->kv_cache_bytes() >> 20,
                              " MiB of KV cache (", config->runner.num_kv_blocks, " blocks)");
        }
        std::cerr << line + "\n" << std::flush;
        if (!AgreeTpStart(comm, loaded.status()).ok()) shard.reset();
        break;
      }
      case TpMessage::kStep:
      case TpMessage::kLogits:
      case TpMessage::kCommProbe:
      case TpMessage::kFetch: {
        // What a loaded shard serves between a session's start and its stop.
        if (shard == nullptr) {
          return absl::InternalError(
              absl::StrCat("tensor_parallel: message ", h.kind, " arrived with no shard loaded"));
        }
        ModelRunner& r = *shard->runner;
        const TpMessage kind = static_cast<TpMessage>(h.kind);
        RETURN_IF_ERROR(kind == TpMessage::kStep        ? r.ServeStep(h)
                        : kind == TpMessage::kLogits    ? r.ServeLogits(h)
                        : kind == TpMessage::kCommProbe ? r.ServeCommProbe(h)
                                                        : r.ServeFetch(h));
        break;
      }
      case TpMessage::kStop:
        shard.reset();
        break;
      case TpMessage::kExit:
        return absl::OkStatus();
      default:
        return absl::InternalError(
            absl::StrCat("tensor_parallel: unknown message ", h.kind, " from rank 0"));
    }
  }
}

}  // namespace saturn
