// --listen (and the HTTP ports): a second server on a busy TCP port or a live unix socket is
// refused with "address in use" naming the address (no SO_REUSEPORT sharing, no socket
// takeover), and --unix_socket_mode sets the socket's permissions.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "server/http/http_listener.h"
#include "server/listen_address.h"
#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

TEST(ListenTest, ASecondServerOnABusyPortIsRefused) {
  auto first = testing::StartServer(testing::TinyConfig(), /*load=*/false);
  ASSERT_NE(first, nullptr);
  ServerConfig config = testing::TinyConfig();
  config.listen = first->app->address();
  ServerApp second(config);
  const absl::Status st = second.StartListening();
  ASSERT_FALSE(st.ok()) << "a second server started on " << config.listen;
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("address in use"), std::string::npos) << st;
  EXPECT_NE(st.message().find(config.listen), std::string::npos) << st;
  EXPECT_NE(st.message().find("--listen"), std::string::npos) << st;
  // The first one is untouched.
  EXPECT_EQ(testing::CheckHealth(first->health.get(), ""),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

// The HTTP endpoints too: httplib's default SO_REUSEPORT let a second server bind the first
// one's --http_port and take half of its connections.
TEST(ListenTest, ASecondHttpListenerOnABusyPortIsRefused) {
  const ServerConfig config = testing::TinyConfig();
  HttpListener first;
  ASSERT_TRUE(first.Init(config, "the HTTP API", [](httplib::Response&) {}).ok());
  ASSERT_TRUE(first.Listen("127.0.0.1", -1, "--http_port").ok());
  HttpListener second;
  ASSERT_TRUE(second.Init(config, "the HTTP API", [](httplib::Response&) {}).ok());
  const absl::Status st = second.Listen("127.0.0.1", first.port(), "--http_port");
  ASSERT_FALSE(st.ok()) << "a second listener bound port " << first.port();
  EXPECT_NE(st.message().find("--http_port: cannot listen on 127.0.0.1:" +
                              std::to_string(first.port()) + " (address in use?)"),
            std::string::npos)
      << st;
}

std::string SocketPath(const std::string& name) {
  return ::testing::TempDir() + "/saturn-" + name + "-" + std::to_string(getpid()) + ".sock";
}

TEST(ListenTest, ALiveUnixSocketIsNotTakenOver) {
  const std::string path = SocketPath("busy");
  unlink(path.c_str());
  ServerConfig config = testing::TinyConfig();
  config.listen = "unix:" + path;
  auto first = testing::StartServer(config, /*load=*/false);
  ASSERT_NE(first, nullptr);
  ServerApp second(config);
  const absl::Status st = second.StartListening();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("address in use"), std::string::npos) << st;
  EXPECT_NE(st.message().find(path), std::string::npos) << st;
  EXPECT_EQ(testing::CheckHealth(first->health.get(), ""),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  first.reset();
  // A stale socket file (no process behind it) is reused.
  ServerApp third(config);
  EXPECT_TRUE(third.StartListening().ok());
}

TEST(ListenTest, UnixSocketModeSetsThePermissions) {
  for (const char* mode : {"0600", "660"}) {
    const std::string path = SocketPath(std::string("mode") + mode);
    unlink(path.c_str());
    ServerConfig config = testing::TinyConfig();
    config.listen = "unix:" + path;
    config.unix_socket_mode = mode;
    auto server = testing::StartServer(config, /*load=*/false);
    ASSERT_NE(server, nullptr);
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, static_cast<mode_t>(std::stoi(mode, nullptr, 8))) << mode;
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(testing::CheckHealth(server->health.get(), ""),
              grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  }
}

TEST(ListenTest, UnixSocketModeIsValidated) {
  ServerConfig config = testing::TinyConfig();
  config.unix_socket_mode = "0660";
  absl::Status st = config.Validate();  // TCP listen
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--unix_socket_mode"), std::string::npos) << st;
  config.listen = "unix:/tmp/x.sock";
  for (const char* bad : {"rw", "0999", "12", "01777"}) {
    config.unix_socket_mode = bad;
    st = config.Validate();
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("--unix_socket_mode"), std::string::npos) << st;
  }
  config.unix_socket_mode = "0640";
  EXPECT_TRUE(config.Validate().ok());
}

TEST(ListenTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackListen("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackListen("localhost:1"));
  EXPECT_TRUE(IsLoopbackListen("[::1]:50051"));
  EXPECT_TRUE(IsLoopbackListen("unix:/tmp/s"));
  EXPECT_FALSE(IsLoopbackListen("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackListen("[::]:50051"));
  EXPECT_FALSE(IsLoopbackListen("10.1.2.3:50051"));
}

}  // namespace
}  // namespace saturn
