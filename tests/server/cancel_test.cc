// Client cancellation and deadlines: each ends the engine request and returns its KV blocks
// (checked through Engine::kv_stats and counters after the fact), and the server keeps
// serving. No test depends on how fast this machine generates.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

using testing::IdsRequest;
using testing::RunStream;

class CancelTest : public testing::SharedServerTest {
 protected:
  void ExpectStillServes() {
    testing::StreamResult r = RunStream(server_->stub.get(), IdsRequest({1, 2, 3}, 4));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.final_message->usage().completion_tokens(), 4);
  }
};

TEST_F(CancelTest, TryCancelMidStreamFreesKvBlocks) {
  Engine& engine = *server_->engine();
  ASSERT_TRUE(testing::WaitForKvFree(engine));
  const int64_t cancelled_before = engine.counters().requests_cancelled;
  // 500 tokens of a 512 context: the request is far from done when the first delta arrives.
  int deltas_seen = 0;
  testing::StreamResult r =
      RunStream(server_->stub.get(), IdsRequest({1, 40, 41, 42}, 500), std::nullopt,
                [&](const v1::TokenDelta&, grpc::ClientContext* ctx) {
                  if (++deltas_seen == 1) ctx->TryCancel();
                });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(r.final_message.has_value());
  EXPECT_GE(deltas_seen, 1);
  EXPECT_TRUE(testing::WaitForKvFree(engine)) << engine.info().kv.blocks_free;
  // The engine cancelled it (rather than running it to the end).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine.counters().requests_cancelled == cancelled_before &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(engine.counters().requests_cancelled, cancelled_before);
  ExpectStillServes();
}

TEST_F(CancelTest, PassedDeadlineFreesKvBlocks) {
  Engine& engine = *server_->engine();
  // The deadline must land mid-stream on any machine: shrink it while the stream finishes
  // in time, grow it while it expires before the first token.
  std::chrono::milliseconds deadline(400);
  bool hit_mid_stream = false;
  for (int attempt = 0; attempt < 16 && !hit_mid_stream; ++attempt) {
    ASSERT_TRUE(testing::WaitForKvFree(engine));
    testing::StreamResult r =
        RunStream(server_->stub.get(), IdsRequest({1, 50, 51}, 500), testing::In(deadline));
    if (r.status.ok()) {
      deadline = std::max(std::chrono::milliseconds(1), deadline / 4);
      continue;
    }
    ASSERT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << r.status.error_message();
    EXPECT_TRUE(testing::WaitForKvFree(engine)) << engine.info().kv.blocks_free;
    if (r.deltas.empty()) {
      deadline *= 3;
    } else {
      hit_mid_stream = true;
    }
  }
  EXPECT_TRUE(hit_mid_stream) << "no deadline landed between the first and last token";
  ExpectStillServes();
}

TEST_F(CancelTest, CancelBeforeAnyTokenFreesKvBlocks) {
  Engine& engine = *server_->engine();
  grpc::ClientContext ctx;
  auto reader = server_->stub->Generate(&ctx, IdsRequest({1, 60, 61}, 500));
  ctx.TryCancel();
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(testing::WaitForKvFree(engine));
  ExpectStillServes();
}

TEST_F(CancelTest, ManyCancelledStreamsLeakNothing) {
  Engine& engine = *server_->engine();
  std::vector<std::thread> threads;
  threads.reserve(16);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      int n = 0;
      RunStream(server_->stub.get(), IdsRequest({1, 3 + i}, 400), std::nullopt,
                [&](const v1::TokenDelta&, grpc::ClientContext* ctx) {
                  if (++n == 1 + i % 3) ctx->TryCancel();
                });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(testing::WaitForKvFree(engine)) << engine.info().kv.blocks_free;
  ExpectStillServes();
}

}  // namespace
}  // namespace saturn
