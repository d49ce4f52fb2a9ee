// Logprobs through gRPC: GenerateRequest.logprobs / prompt_logprobs come back in the stream's
// deltas (one entry per token; the prompt's in the first delta), equal to the engine's own
// for the same request, without changing the tokens drawn; out-of-range values are
// INVALID_ARGUMENT naming the field and the limit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

using testing::IdsRequest;
using testing::RunStream;

class LogprobsServerTest : public testing::SharedServerTest {};

const std::vector<int> kPrompt = {1, 72, 101, 108, 108, 111, 500, 4000, 17, 9};

TEST_F(LogprobsServerTest, DeltasCarryTokenAndPromptLogprobsEqualToTheEngines) {
  v1::GenerateRequest req = IdsRequest(kPrompt, 8);
  req.set_logprobs(3);
  req.set_prompt_logprobs(2);
  req.set_temperature(0.7f);
  req.set_seed(5);
  const testing::StreamResult r = RunStream(server_->stub.get(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.tokens.size(), 8u);

  // The engine's own events for the same request.
  GenerateRequest e = testing::EngineIdsRequest(kPrompt, 8);
  e.sampling.temperature = 0.7f;
  e.sampling.seed = 5;
  e.sampling.logprobs = 3;
  e.sampling.prompt_logprobs = 2;
  auto stream = RequestStream::Open(server_->engine(), e);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<PositionLogprobs> want, want_prompt;
  TokenEvent ev;
  while ((*stream)->Next(&ev)) {
    want.insert(want.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (!ev.prompt_logprobs.empty()) want_prompt = ev.prompt_logprobs;
  }

  std::vector<v1::PositionLogprobs> got;
  int deltas_with_prompt = 0;
  for (const v1::TokenDelta& d : r.deltas) {
    EXPECT_EQ(d.logprobs_size(), d.token_ids_size());
    for (int i = 0; i < d.logprobs_size(); ++i) {
      EXPECT_EQ(d.logprobs(i).token().token_id(), d.token_ids(i));
      got.push_back(d.logprobs(i));
    }
    if (d.prompt_logprobs_size() > 0) {
      ++deltas_with_prompt;
      EXPECT_EQ(&d, &r.deltas.front()) << "prompt logprobs belong in the first delta";
      ASSERT_EQ(d.prompt_logprobs_size(), static_cast<int>(kPrompt.size()) - 1);
      ASSERT_EQ(want_prompt.size(), kPrompt.size() - 1);
      for (int i = 0; i < d.prompt_logprobs_size(); ++i) {
        const v1::PositionLogprobs& p = d.prompt_logprobs(i);
        EXPECT_EQ(p.token().token_id(), kPrompt[i + 1]);
        EXPECT_NEAR(p.token().logprob(), want_prompt[i].token.logprob, 1e-5);
        EXPECT_EQ(p.token().rank(), want_prompt[i].token.rank);
        ASSERT_EQ(p.top_size(), 2);
        EXPECT_EQ(p.top(0).token_id(), want_prompt[i].top[0].token_id);
      }
    }
  }
  EXPECT_EQ(deltas_with_prompt, 1);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k].token().logprob(), want[k].token.logprob, 1e-5);
    EXPECT_LE(got[k].token().logprob(), 0.f);
    EXPECT_GE(got[k].token().rank(), 1);
    ASSERT_EQ(got[k].top_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got[k].top(i).token_id(), want[k].top[i].token_id);
      if (i > 0) EXPECT_LE(got[k].top(i).logprob(), got[k].top(i - 1).logprob());
    }
  }
  // Asking changed nothing about the tokens.
  v1::GenerateRequest plain = IdsRequest(kPrompt, 8);
  plain.set_temperature(0.7f);
  plain.set_seed(5);
  const testing::StreamResult p = RunStream(server_->stub.get(), plain);
  ASSERT_TRUE(p.status.ok());
  EXPECT_EQ(p.tokens, r.tokens);
  for (const v1::TokenDelta& d : p.deltas) {
    EXPECT_EQ(d.logprobs_size(), 0);
    EXPECT_EQ(d.prompt_logprobs_size(), 0);
  }
}

TEST_F(LogprobsServerTest, OutOfRangeIsInvalidArgumentNamingFieldAndLimit) {
  struct Case {
    int logprobs, prompt_logprobs;
    const char* want;
  };
  for (const Case& c :
       {Case{21, 0, "logprobs: must be in [0, 20]"}, Case{-1, 0, "logprobs: must be in [0, 20]"},
        Case{0, 50, "prompt_logprobs: must be in [0, 20]"},
        Case{0, -3, "prompt_logprobs: must be in [0, 20]"}}) {
    v1::GenerateRequest req = IdsRequest(kPrompt, 4);
    req.set_logprobs(c.logprobs);
    req.set_prompt_logprobs(c.prompt_logprobs);
    const testing::StreamResult r = RunStream(server_->stub.get(), req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.want;
    EXPECT_NE(r.status.error_message().find(c.want), std::string::npos) << r.status.error_message();
    EXPECT_TRUE(r.deltas.empty());
  }
  // The limits themselves are fine.
  v1::GenerateRequest ok = IdsRequest(kPrompt, 2);
  ok.set_logprobs(20);
  ok.set_prompt_logprobs(0);
  const testing::StreamResult r = RunStream(server_->stub.get(), ok);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.deltas.front().logprobs(0).top_size(), 20);
  EXPECT_EQ(r.deltas.front().prompt_logprobs(0).top_size(), 0);
}

}  // namespace
}  // namespace saturn
