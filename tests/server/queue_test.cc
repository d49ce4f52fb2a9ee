// The bounded waiting queue: past --max_queued_requests, Generate is RESOURCE_EXHAUSTED while
// the accepted requests run to completion.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

TEST(QueueTest, OverflowIsResourceExhaustedAndAcceptedRequestsComplete) {
  ServerConfig config = testing::TinyConfig();
  // One sequence at a time and room for two waiting: a burst of long requests must overflow.
  config.engine.options.max_num_seqs = 1;
  config.engine.max_queued_requests = 2;
  auto server = testing::StartServer(config);
  ASSERT_NE(server, nullptr);

  constexpr int kBurst = 12;
  constexpr int kMaxTokens = 300;
  std::vector<testing::StreamResult> results(kBurst);
  std::vector<std::thread> threads;
  threads.reserve(kBurst);
  for (int i = 0; i < kBurst; ++i) {
    threads.emplace_back([&, i] {
      results[i] =
          testing::RunStream(server->stub.get(), testing::IdsRequest({1, 100 + i, 7}, kMaxTokens));
    });
  }
  for (auto& t : threads) t.join();

  int ok = 0;
  int exhausted = 0;
  for (int i = 0; i < kBurst; ++i) {
    SCOPED_TRACE(i);
    const testing::StreamResult& r = results[i];
    if (r.status.ok()) {
      ++ok;
      ASSERT_TRUE(r.final_message.has_value());
      EXPECT_EQ(r.final_message->finish_reason(), v1::FINISH_REASON_LENGTH);
      EXPECT_EQ(r.final_message->usage().completion_tokens(), kMaxTokens);
      EXPECT_EQ(static_cast<int>(r.tokens.size()), kMaxTokens);
    } else {
      ++exhausted;
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << r.status.error_message();
      EXPECT_NE(r.status.error_message().find("max_queued_requests"), std::string::npos)
          << r.status.error_message();
      EXPECT_TRUE(r.deltas.empty());
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
  EXPECT_TRUE(testing::WaitForKvFree(*server->engine()));

  // The queue drains and the server serves again.
  testing::StreamResult after =
      testing::RunStream(server->stub.get(), testing::IdsRequest({1, 2}, 5));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
}

}  // namespace
}  // namespace saturn
