// Server lifecycle: health NOT_SERVING before warm-up and during shutdown, draining of
// in-flight streams within the grace period, UNAVAILABLE after it, and server reflection.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>

#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

using HealthStatus = grpc::health::v1::HealthCheckResponse;
using testing::CheckHealth;

constexpr const char* kSaturn = "saturn.v1.Saturn";

TEST(LifecycleTest, HealthIsNotServingUntilTheEngineIsWarm) {
  auto server = testing::StartServer(testing::TinyConfig(), /*load=*/false);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(CheckHealth(server->health.get(), ""), HealthStatus::NOT_SERVING);
  EXPECT_EQ(CheckHealth(server->health.get(), kSaturn), HealthStatus::NOT_SERVING);
  // Saturn answers, but only with UNAVAILABLE, while the model loads.
  testing::StreamResult r = testing::RunStream(server->stub.get(), testing::IdsRequest({1, 2}, 2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_EQ(server->stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  absl::Status st = server->app->LoadEngine();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(CheckHealth(server->health.get(), ""), HealthStatus::SERVING);
  EXPECT_EQ(CheckHealth(server->health.get(), kSaturn), HealthStatus::SERVING);
  r = testing::RunStream(server->stub.get(), testing::IdsRequest({1, 2}, 2));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
}

TEST(LifecycleTest, HealthIsNotServingWhileDrainingAndNewCallsAreRefused) {
  auto server = testing::StartServer(testing::TinyConfig());
  ASSERT_NE(server, nullptr);
  // A call the test controls keeps the drain open (as a long stream would).
  std::optional<int64_t> held = server->app->state()->BeginCall(nullptr);
  ASSERT_TRUE(held.has_value());
  auto shutdown = std::async(std::launch::async, [&] { server->app->Shutdown(); });

  bool saw_not_serving = false;
  for (int i = 0; i < 2000 && !saw_not_serving; ++i) {
    saw_not_serving = CheckHealth(server->health.get(), kSaturn) == HealthStatus::NOT_SERVING;
    if (!saw_not_serving) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(saw_not_serving);
  EXPECT_EQ(CheckHealth(server->health.get(), ""), HealthStatus::NOT_SERVING);
  testing::StreamResult r = testing::RunStream(server->stub.get(), testing::IdsRequest({1, 2}, 2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(shutdown.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);

  server->app->state()->EndCall(*held);
  shutdown.get();  // drained: returns well before the 30 s grace
  EXPECT_EQ(server->app->engine(), nullptr);
  EXPECT_FALSE(CheckHealth(server->health.get(), "").has_value());  // gone
}

TEST(LifecycleTest, ShutdownLetsAnInFlightStreamFinishWithinGrace) {
  auto server = testing::StartServer(testing::TinyConfig());
  ASSERT_NE(server, nullptr);
  std::future<void> shutdown;
  testing::StreamResult r = testing::RunStream(
      server->stub.get(), testing::IdsRequest({1, 70, 71}, 200), std::nullopt,
      [&](const v1::TokenDelta&, grpc::ClientContext*) {
        if (!shutdown.valid()) {
          shutdown = std::async(std::launch::async, [&] { server->app->Shutdown(); });
        }
      });
  ASSERT_TRUE(shutdown.valid());
  shutdown.get();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_TRUE(r.final_message.has_value());
  EXPECT_EQ(r.final_message->usage().completion_tokens(), 200);
  EXPECT_EQ(static_cast<int>(r.tokens.size()), 200);
}

TEST(LifecycleTest, StreamsStillRunningAfterGraceEndUnavailable) {
  ServerConfig config = testing::TinyConfig();
  config.shutdown_grace = absl::ZeroDuration();
  auto server = testing::StartServer(config);
  ASSERT_NE(server, nullptr);
  std::future<void> shutdown;
  testing::StreamResult r = testing::RunStream(
      server->stub.get(), testing::IdsRequest({1, 80, 81}, 500), std::nullopt,
      [&](const v1::TokenDelta&, grpc::ClientContext*) {
        if (!shutdown.valid()) {
          shutdown = std::async(std::launch::async, [&] { server->app->Shutdown(); });
        }
      });
  ASSERT_TRUE(shutdown.valid());
  shutdown.get();
  // 499 tokens cannot outrun a zero grace period in practice, but either outcome is clean.
  if (r.status.ok()) {
    EXPECT_EQ(r.final_message->usage().completion_tokens(), 500);
  } else {
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
    EXPECT_NE(r.status.error_message().find("shutting down"), std::string::npos);
    EXPECT_LT(r.tokens.size(), 500u);
  }
  EXPECT_EQ(server->app->engine(), nullptr);
}

// Server reflection over the raw v1alpha protocol (Debian's gRPC lacks the client-side
// ProtoReflectionDescriptorDatabase header): ServerReflectionRequest{list_services: ""} is
// field 7, length 0; the reply lists service names as plain strings.
TEST(LifecycleTest, ReflectionListsSaturn) {
  auto server = testing::StartServer(testing::TinyConfig());
  ASSERT_NE(server, nullptr);
  grpc::GenericStub stub(server->channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::In(std::chrono::seconds(30)));
  grpc::CompletionQueue cq;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t want) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  ASSERT_TRUE(ok);
  const std::string request("\x3a\x00", 2);
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  step(2);
  ASSERT_TRUE(ok);
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(3));
  step(3);
  ASSERT_TRUE(ok);
  call->WritesDone(reinterpret_cast<void*>(4));
  step(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(status.ok()) << status.error_message();

  std::string reply;
  ASSERT_TRUE(testing::BufferBytes(in, &reply));
  EXPECT_NE(reply.find(kSaturn), std::string::npos);
  EXPECT_NE(reply.find("grpc.health.v1.Health"), std::string::npos);
}

}  // namespace
}  // namespace saturn
