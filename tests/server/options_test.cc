// GetServerInfo reports the running engine; UpdateEngineOptions applies at the next step
// (visible in the step records' options) and refuses what the backend cannot do.
#include <gtest/gtest.h>

#include "engine/model_config.h"
#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

class OptionsTest : public testing::SharedServerTest {
 protected:
  static grpc::Status Update(const v1::UpdateEngineOptionsRequest& req,
                             v1::UpdateEngineOptionsResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(testing::In(std::chrono::seconds(60)));
    return server_->stub->UpdateEngineOptions(&ctx, req, resp);
  }
  static v1::ServerInfo Info() {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    grpc::Status st = server_->stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return info;
  }
};

TEST_F(OptionsTest, ServerInfoDescribesTheRunningEngine) {
  const v1::ServerInfo info = Info();
  const Engine& engine = *server_->engine();
  const ModelConfig tiny = *PresetConfig("tiny");
  EXPECT_EQ(info.model().vocab_size(), tiny.vocab_size);
  EXPECT_EQ(info.model().num_layers(), tiny.num_layers);
  EXPECT_EQ(info.model().num_kv_heads(), tiny.num_kv_heads);
  EXPECT_EQ(info.model().num_parameters(), tiny.NumParameters());
  EXPECT_GT(info.model().weight_bytes(), 0);
  EXPECT_TRUE(info.model().has_text_tokenizer());
  EXPECT_EQ(info.model().tokenizer(), "byte");
  EXPECT_EQ(info.backend().name(), "cpu");
  EXPECT_FALSE(info.backend().device_name().empty());
  EXPECT_FALSE(info.backend().supports_cuda_graphs());
  EXPECT_EQ(info.options().max_num_seqs(), engine.options().max_num_seqs);
  EXPECT_EQ(info.limits().max_model_len(), 512);
  EXPECT_EQ(info.limits().max_num_seqs_limit(), engine.config().max_num_seqs_limit);
  EXPECT_EQ(info.limits().max_queued_requests(), 256);
  EXPECT_EQ(info.limits().max_prompt_text_bytes(), 511);
  EXPECT_EQ(info.kv_cache().num_blocks(), engine.kv_stats().num_blocks);
  EXPECT_EQ(info.kv_cache().block_size(), 16);
  EXPECT_GT(info.kv_cache().capacity_bytes(), 0);
  EXPECT_EQ(info.kv_cache().max_model_len(), 512);
  EXPECT_EQ(info.listen_address(), server_->app->address());
  EXPECT_NE(info.listen_address().find(std::to_string(server_->app->port())), std::string::npos);
}

TEST_F(OptionsTest, UpdateTakesEffectOnTheNextStep) {
  v1::UpdateEngineOptionsRequest req;
  req.set_max_num_seqs(3);
  req.set_max_num_batched_tokens(37);
  v1::UpdateEngineOptionsResponse resp;
  grpc::Status st = Update(req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.options().max_num_seqs(), 3);
  EXPECT_EQ(resp.options().max_num_batched_tokens(), 37);
  EXPECT_FALSE(resp.options().cuda_graphs());
  const double applied_us = NowUs();

  // A prompt longer than the token budget: prefill must be chunked at 37 tokens per step.
  std::vector<int> prompt(100, 9);
  prompt[0] = 1;
  testing::StreamResult r = testing::RunStream(server_->stub.get(), testing::IdsRequest(prompt, 4));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const std::vector<StepRecord> steps = server_->engine()->steps().Since(applied_us);
  ASSERT_FALSE(steps.empty());
  for (const StepRecord& s : steps) {
    EXPECT_EQ(s.options.max_num_seqs, 3);
    EXPECT_EQ(s.options.max_num_batched_tokens, 37);
    EXPECT_LE(s.num_prefill_tokens + s.num_decode_tokens, 37);
  }
  EXPECT_EQ(Info().options().max_num_batched_tokens(), 37);

  // Partial update: only the field set changes.
  v1::UpdateEngineOptionsRequest partial;
  partial.set_max_num_batched_tokens(2048);
  ASSERT_TRUE(Update(partial, &resp).ok());
  EXPECT_EQ(resp.options().max_num_seqs(), 3);
  EXPECT_EQ(resp.options().max_num_batched_tokens(), 2048);
  // An empty update changes nothing and returns the options in force.
  ASSERT_TRUE(Update(v1::UpdateEngineOptionsRequest(), &resp).ok());
  EXPECT_EQ(resp.options().max_num_seqs(), 3);
}

TEST_F(OptionsTest, CudaGraphsOnTheCpuBackendIsFailedPrecondition) {
  const EngineOptions before = server_->engine()->options();
  v1::UpdateEngineOptionsRequest req;
  req.set_cuda_graphs(true);
  req.set_max_num_seqs(5);
  v1::UpdateEngineOptionsResponse resp;
  grpc::Status st = Update(req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("cuda_graphs"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("cpu"), std::string::npos) << st.error_message();
  // Nothing changed, including the other field of the rejected request.
  EXPECT_EQ(server_->engine()->options().max_num_seqs, before.max_num_seqs);
  EXPECT_FALSE(server_->engine()->options().cuda_graphs);
  // And the server still serves.
  testing::StreamResult r = testing::RunStream(server_->stub.get(), testing::IdsRequest({1, 4}, 3));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
}

}  // namespace
}  // namespace saturn
