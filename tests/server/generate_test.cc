// Generate end to end over a real loopback server: the streamed tokens equal the engine's
// own output (RequestStream) for the same request and seed, text prompts and decoded text,
// and 64 concurrent streams with exact usage counts.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"
#include "server/text_stream.h"
#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

using testing::EngineIdsRequest;
using testing::IdsRequest;
using testing::RunStream;

class GenerateTest : public testing::SharedServerTest {
 protected:
  // The engine's own tokens for the same request.
  static std::vector<int> EngineTokens(GenerateRequest req, TokenEvent* final_event) {
    auto stream = RequestStream::Open(server_->engine(), std::move(req));
    EXPECT_TRUE(stream.ok()) << stream.status();
    std::vector<int> tokens;
    if (stream.ok()) *final_event = (*stream)->Drain(&tokens);
    return tokens;
  }
};

void ExpectWellFormed(const testing::StreamResult& r) {
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_TRUE(r.final_message.has_value());
  EXPECT_EQ(r.messages_after_final, 0);
  int64_t last = 0;
  for (const v1::TokenDelta& d : r.deltas) {
    EXPECT_GE(d.server_time_us(), last);
    EXPECT_GE(d.elapsed_us(), 0);
    last = d.server_time_us();
  }
  const v1::RequestTimings& t = r.final_message->timings();
  EXPECT_GT(t.arrival_us(), 0);
  EXPECT_GE(t.first_token_us(), t.first_scheduled_us());
  EXPECT_GE(t.e2e_time_us(), t.time_to_first_token_us());
  EXPECT_GE(t.time_to_first_token_us(), t.queue_time_us());
  EXPECT_EQ(r.final_message->usage().completion_tokens(), static_cast<int>(r.tokens.size()));
}

TEST_F(GenerateTest, GreedyStreamEqualsEngineOutput) {
  const std::vector<int> prompt = {1, 72, 101, 108, 108, 111, 500, 4000};
  v1::GenerateRequest req = IdsRequest(prompt, 40);
  req.set_client_request_id("greedy-1");
  testing::StreamResult r = RunStream(server_->stub.get(), req);
  ExpectWellFormed(r);
  EXPECT_EQ(r.final_message->finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.final_message->usage().prompt_tokens(), static_cast<int>(prompt.size()));
  EXPECT_EQ(r.final_message->usage().completion_tokens(), 40);
  EXPECT_EQ(r.final_message->client_request_id(), "greedy-1");
  EXPECT_GT(r.final_message->request_id(), 0);

  GenerateRequest engine_req = EngineIdsRequest(prompt, 40);
  TokenEvent final_event;
  EXPECT_EQ(r.tokens, EngineTokens(engine_req, &final_event));
  EXPECT_EQ(final_event.finish_reason, FinishReason::kLength);
}

TEST_F(GenerateTest, SeededSamplingStreamEqualsEngineOutput) {
  const std::vector<int> prompt = {1, 10, 20, 30, 40};
  v1::GenerateRequest req = IdsRequest(prompt, 48);
  req.set_temperature(0.9f);
  req.set_top_k(64);
  req.set_top_p(0.95f);
  req.set_seed(424242);
  testing::StreamResult r = RunStream(server_->stub.get(), req);
  ExpectWellFormed(r);
  EXPECT_EQ(r.final_message->seed(), 424242);

  GenerateRequest engine_req = EngineIdsRequest(prompt, 48);
  engine_req.sampling.temperature = 0.9f;
  engine_req.sampling.top_k = 64;
  engine_req.sampling.top_p = 0.95f;
  engine_req.sampling.seed = 424242;
  TokenEvent final_event;
  EXPECT_EQ(r.tokens, EngineTokens(engine_req, &final_event));

  // Same seed over gRPC again: same tokens.
  EXPECT_EQ(RunStream(server_->stub.get(), req).tokens, r.tokens);
}

TEST_F(GenerateTest, UnseededRequestReportsAReplayableSeed) {
  v1::GenerateRequest req = IdsRequest({1, 5, 6}, 24);
  req.set_temperature(1.0f);
  testing::StreamResult first = RunStream(server_->stub.get(), req);
  ExpectWellFormed(first);
  req.set_seed(first.final_message->seed());
  EXPECT_EQ(RunStream(server_->stub.get(), req).tokens, first.tokens);
}

TEST_F(GenerateTest, TextPromptIsByteEncodedWithBosAndTextIsDecoded) {
  v1::GenerateRequest req;
  req.set_prompt_text("Hello, Saturn \xE2\x99\x84");  // U+2644, the Saturn sign
  req.set_max_tokens(32);
  req.set_ignore_eos(true);
  testing::StreamResult r = RunStream(server_->stub.get(), req);
  ExpectWellFormed(r);
  const std::vector<int> encoded = ByteTokenizer().Encode(req.prompt_text(), true);
  EXPECT_EQ(encoded.front(), ByteTokenizer::kBos);
  EXPECT_EQ(r.final_message->usage().prompt_tokens(), static_cast<int>(encoded.size()));

  GenerateRequest engine_req = EngineIdsRequest(encoded, 32);
  TokenEvent final_event;
  EXPECT_EQ(r.tokens, EngineTokens(engine_req, &final_event));

  // The text is the byte tokens' bytes, made valid UTF-8 the same way.
  Utf8Stream expected;
  std::string text = expected.Push(ByteTokenizer().Decode(r.tokens));
  text += expected.Flush();
  EXPECT_EQ(r.text, text);
}

TEST_F(GenerateTest, TokensOnlyFormatCarriesNoText) {
  v1::GenerateRequest req = IdsRequest({1, 80, 81, 82}, 16);
  req.set_output_format(v1::OUTPUT_FORMAT_TOKENS);
  testing::StreamResult r = RunStream(server_->stub.get(), req);
  ExpectWellFormed(r);
  EXPECT_TRUE(r.text.empty());
}

TEST_F(GenerateTest, SixtyFourConcurrentStreamsCompleteWithExactUsage) {
  constexpr int kStreams = 64;
  std::vector<testing::StreamResult> results(kStreams);
  std::vector<std::thread> threads;
  threads.reserve(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      std::vector<int> prompt = {1};
      for (int j = 0; j < 3 + i % 11; ++j) prompt.push_back(3 + (i * 31 + j * 7) % 250);
      v1::GenerateRequest req = IdsRequest(prompt, 8 + i % 13);
      req.set_temperature(i % 2 == 0 ? 0.0f : 0.8f);
      req.set_seed(i);
      results[i] = RunStream(server_->stub.get(), req);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(i);
    const testing::StreamResult& r = results[i];
    ExpectWellFormed(r);
    EXPECT_EQ(r.final_message->finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(r.final_message->usage().prompt_tokens(), 4 + i % 11);
    EXPECT_EQ(r.final_message->usage().completion_tokens(), 8 + i % 13);
    EXPECT_EQ(static_cast<int>(r.tokens.size()), 8 + i % 13);
  }
  EXPECT_TRUE(testing::WaitForKvFree(*server_->engine()));
}

}  // namespace
}  // namespace saturn
