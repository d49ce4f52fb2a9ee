// Every invalid Generate / UpdateEngineOptions input returns INVALID_ARGUMENT naming the
// field and the limit, before any engine work, and the server keeps serving afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

using testing::IdsRequest;
using testing::RunStream;

struct BadCase {
  std::string name;
  std::function<void(v1::GenerateRequest*)> mutate;  // applied to a valid request
  std::vector<std::string> expected;                 // substrings of the message
};

constexpr int kVocab = 4096;       // tiny preset
constexpr int kMaxModelLen = 512;  // TinyConfig

std::vector<BadCase> BadCases() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"empty_prompt",
       [](v1::GenerateRequest* r) { r->clear_prompt_token_ids(); },
       {"prompt_text", "prompt_token_ids", "neither"}},
      {"text_and_ids",
       [](v1::GenerateRequest* r) { r->set_prompt_text("hi"); },
       {"prompt_text", "prompt_token_ids", "both"}},
      {"id_above_vocab",
       [](v1::GenerateRequest* r) { r->add_prompt_token_ids(kVocab); },
       {"prompt_token_ids[3]", "4096"}},
      {"negative_id",
       [](v1::GenerateRequest* r) { r->set_prompt_token_ids(0, -1); },
       {"prompt_token_ids[0]", "4096"}},
      {"prompt_plus_max_tokens_beyond_context",
       [](v1::GenerateRequest* r) { r->set_max_tokens(kMaxModelLen); },
       {"max_tokens", "512"}},
      {"max_tokens_zero", [](v1::GenerateRequest* r) { r->set_max_tokens(0); }, {"max_tokens"}},
      {"max_tokens_negative",
       [](v1::GenerateRequest* r) { r->set_max_tokens(-5); },
       {"max_tokens"}},
      {"max_tokens_huge",
       [](v1::GenerateRequest* r) { r->set_max_tokens(2147483647); },
       {"max_tokens", "512"}},
      {"top_p_zero", [](v1::GenerateRequest* r) { r->set_top_p(0.0f); }, {"top_p", "(0, 1]"}},
      {"top_p_above_one", [](v1::GenerateRequest* r) { r->set_top_p(1.5f); }, {"top_p"}},
      {"top_p_nan", [nan](v1::GenerateRequest* r) { r->set_top_p(nan); }, {"top_p"}},
      {"temperature_negative",
       [](v1::GenerateRequest* r) { r->set_temperature(-0.5f); },
       {"temperature"}},
      {"temperature_nan",
       [nan](v1::GenerateRequest* r) { r->set_temperature(nan); },
       {"temperature"}},
      {"temperature_inf",
       [inf](v1::GenerateRequest* r) { r->set_temperature(inf); },
       {"temperature"}},
      {"top_k_negative", [](v1::GenerateRequest* r) { r->set_top_k(-1); }, {"top_k"}},
      {"stop_id_outside_vocab",
       [](v1::GenerateRequest* r) { r->add_stop_token_ids(99999); },
       {"stop_token_ids[0]", "4096"}},
      {"unknown_output_format",
       [](v1::GenerateRequest* r) { r->set_output_format(static_cast<v1::OutputFormat>(7)); },
       {"output_format", "7"}},
      {"prompt_text_too_long",
       [](v1::GenerateRequest* r) {
         r->clear_prompt_token_ids();
         r->set_prompt_text(std::string(kMaxModelLen, 'a'));
       },
       {"prompt_text", "510"}},
      {"too_many_token_ids",
       [](v1::GenerateRequest* r) {
         for (int i = 0; i < kMaxModelLen; ++i) r->add_prompt_token_ids(5);
       },
       {"prompt_token_ids", "512"}},
      {"client_request_id_too_long",
       [](v1::GenerateRequest* r) { r->set_client_request_id(std::string(1000, 'x')); },
       {"client_request_id", "256"}},
      {"too_many_stop_ids",
       [](v1::GenerateRequest* r) {
         for (int i = 0; i < 300; ++i) r->add_stop_token_ids(3);
       },
       {"stop_token_ids", "256"}},
  };
}

class ValidationTest : public testing::SharedServerTest {};

TEST_F(ValidationTest, EveryBadFieldIsInvalidArgumentNamingFieldAndLimit) {
  const int64_t submitted_before = server_->engine()->counters().requests_submitted;
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.name);
    v1::GenerateRequest req = IdsRequest({1, 20, 30}, 8);
    c.mutate(&req);
    testing::StreamResult r = RunStream(server_->stub.get(), req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << r.status.error_message();
    for (const std::string& s : c.expected) {
      EXPECT_NE(r.status.error_message().find(s), std::string::npos)
          << "\"" << r.status.error_message() << "\" lacks \"" << s << "\"";
    }
    EXPECT_TRUE(r.deltas.empty());
    EXPECT_FALSE(r.final_message.has_value());
  }
  // No engine work was done for any of them.
  EXPECT_EQ(server_->engine()->counters().requests_submitted, submitted_before);

  testing::StreamResult ok = RunStream(server_->stub.get(), IdsRequest({1, 20, 30}, 8));
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.final_message->usage().completion_tokens(), 8);
}

TEST_F(ValidationTest, BoundaryValuesAreAccepted) {
  v1::GenerateRequest req = IdsRequest({1, kVocab - 1, 0}, kMaxModelLen - 3);
  req.set_top_p(1.0f);
  req.set_top_k(0);
  req.set_temperature(0.0f);
  req.set_max_tokens(4);
  req.add_stop_token_ids(kVocab - 1);
  testing::StreamResult r = RunStream(server_->stub.get(), req);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();

  v1::GenerateRequest longest = IdsRequest({1}, kMaxModelLen - 1);
  longest.set_max_tokens(kMaxModelLen - 1);
  r = RunStream(server_->stub.get(), longest);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_TRUE(r.final_message.has_value());
  EXPECT_EQ(r.final_message->usage().completion_tokens(), kMaxModelLen - 1);
}

// GetServerInfo's max_prompt_text_bytes is the real limit: exactly that many bytes are
// accepted (with max_tokens 1), one more is rejected.
TEST_F(ValidationTest, MaxPromptTextBytesIsTheAcceptedMaximum) {
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(server_->stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  const int limit = info.limits().max_prompt_text_bytes();
  ASSERT_GT(limit, 0);
  v1::GenerateRequest req;
  req.set_max_tokens(1);
  req.set_prompt_text(std::string(limit, 'a'));
  testing::StreamResult r = RunStream(server_->stub.get(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_TRUE(r.final_message.has_value());
  EXPECT_EQ(r.final_message->usage().prompt_tokens(), limit + 1);  // BOS
  EXPECT_EQ(r.final_message->usage().completion_tokens(), 1);

  req.set_prompt_text(std::string(limit + 1, 'a'));
  r = RunStream(server_->stub.get(), req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("prompt_text"), std::string::npos)
      << r.status.error_message();
}

TEST_F(ValidationTest, BadEngineOptionsAreInvalidArgumentNamingTheField) {
  const EngineOptions before = server_->engine()->options();
  struct OptCase {
    std::function<void(v1::UpdateEngineOptionsRequest*)> mutate;
    std::string field;
  };
  const int seq_limit = server_->engine()->info().max_num_seqs_limit;
  const int tok_limit = server_->engine()->info().max_num_batched_tokens_limit;
  const std::vector<OptCase> cases = {
      {[](auto* r) { r->set_max_num_seqs(0); }, "max_num_seqs"},
      {[seq_limit](auto* r) { r->set_max_num_seqs(seq_limit + 1); }, "max_num_seqs"},
      {[](auto* r) { r->set_max_num_batched_tokens(-3); }, "max_num_batched_tokens"},
      {[tok_limit](auto* r) { r->set_max_num_batched_tokens(tok_limit + 1); },
       "max_num_batched_tokens"},
  };
  for (const OptCase& c : cases) {
    SCOPED_TRACE(c.field);
    v1::UpdateEngineOptionsRequest req;
    c.mutate(&req);
    v1::UpdateEngineOptionsResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = server_->stub->UpdateEngineOptions(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find(c.field), std::string::npos) << st.error_message();
  }
  const EngineOptions after = server_->engine()->options();
  EXPECT_EQ(after.max_num_seqs, before.max_num_seqs);
  EXPECT_EQ(after.max_num_batched_tokens, before.max_num_batched_tokens);
}

}  // namespace
}  // namespace saturn
