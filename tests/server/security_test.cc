// Security flags (server/security.h): TLS and mutual TLS on the gRPC port and /metrics, the
// bearer token for the admin methods (--auth_scope=admin) or everything (all), config
// validation, and the start-up warnings for listening beyond loopback. The certificates are
// test-only ones in tests/server/testdata.
#include "server/security.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/server/server_test_util.h"

namespace saturn {
namespace {

using HealthStatus = grpc::health::v1::HealthCheckResponse;

const std::string kData = std::string(SATURN_SOURCE_DIR) + "/tests/server/testdata/";

std::string TokenFile(const std::string& token) {
  std::string path =
      ::testing::TempDir() + "/saturn-token-" + std::to_string(getpid()) + "-" + token;
  std::ofstream(path) << token << "\n";
  return path;
}

ServerConfig TlsConfig() {
  ServerConfig c = testing::TinyConfig();
  c.tls_cert = kData + "server.pem";
  c.tls_key = kData + "server.key";
  return c;
}

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address, bool client_cert) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = testing::ReadFile(kData + "ca.pem");
  if (client_cert) {
    o.pem_private_key = testing::ReadFile(kData + "client.key");
    o.pem_cert_chain = testing::ReadFile(kData + "client.pem");
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

std::optional<HealthStatus::ServingStatus> Health(const std::shared_ptr<grpc::Channel>& channel,
                                                  const std::string& token = "",
                                                  grpc::Status* status = nullptr) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::In(std::chrono::seconds(10)));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (status != nullptr) *status = st;
  if (!st.ok()) return std::nullopt;
  return resp.status();
}

grpc::Status UpdateOptions(const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& token) {
  auto stub = v1::Saturn::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::In(std::chrono::seconds(30)));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  v1::UpdateEngineOptionsResponse resp;
  return stub->UpdateEngineOptions(&ctx, v1::UpdateEngineOptionsRequest(), &resp);
}

grpc::Status ServerInfo(const std::shared_ptr<grpc::Channel>& channel, const std::string& token) {
  auto stub = v1::Saturn::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::In(std::chrono::seconds(30)));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  v1::ServerInfo info;
  return stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
}

TEST(SecurityTest, TlsServesTlsClientsOnly) {
  ServerConfig config = TlsConfig();
  ServerApp app(config);
  ASSERT_TRUE(app.StartListening().ok());
  EXPECT_EQ(Health(TlsChannel(app.address(), false)), HealthStatus::NOT_SERVING);
  grpc::Status st;
  EXPECT_EQ(Health(grpc::CreateChannel(app.address(), grpc::InsecureChannelCredentials()), "", &st),
            std::nullopt);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
}

TEST(SecurityTest, MutualTlsNeedsAClientCertificate) {
  ServerConfig config = TlsConfig();
  config.tls_client_ca = kData + "ca.pem";
  ServerApp app(config);
  ASSERT_TRUE(app.StartListening().ok());
  EXPECT_EQ(Health(TlsChannel(app.address(), true)), HealthStatus::NOT_SERVING);
  EXPECT_EQ(Health(TlsChannel(app.address(), false)), std::nullopt);
}

// --auth_scope=admin (plaintext loopback: gRPC's local credentials carry the gate).
TEST(SecurityTest, TokenGuardsTheAdminMethodsOnly) {
  for (const std::string& listen :
       {std::string("127.0.0.1:0"),
        "unix:" + ::testing::TempDir() + "/saturn-auth-" + std::to_string(getpid()) + ".sock"}) {
    SCOPED_TRACE(listen);
    ServerConfig config = testing::TinyConfig();
    config.listen = listen;
    config.auth_token_file = TokenFile("s3cret-admin");
    ServerApp app(config);
    ASSERT_TRUE(app.StartListening().ok());
    auto channel = grpc::CreateChannel(app.address(), grpc::InsecureChannelCredentials());
    grpc::Status st = UpdateOptions(channel, "");
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
    EXPECT_NE(st.error_message().find("UpdateEngineOptions"), std::string::npos);
    st = UpdateOptions(channel, "wrong");
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
    st = UpdateOptions(channel, "s3cret-admin");  // past the gate: the model is loading
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    // Everything else needs no token.
    EXPECT_EQ(ServerInfo(channel, "").error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(Health(channel), HealthStatus::NOT_SERVING);
  }
}

TEST(SecurityTest, ScopeAllGuardsEveryRpcAndMetrics) {
  ServerConfig config = TlsConfig();
  config.auth_token_file = TokenFile("s3cret-all");
  config.auth_scope = "all";
  config.metrics_port = -1;
  config.http_port = -1;
  auto server = std::make_unique<ServerApp>(config);
  ASSERT_TRUE(server->StartListening().ok());
  auto channel = TlsChannel(server->address(), false);
  grpc::Status st;
  EXPECT_EQ(Health(channel, "", &st), std::nullopt);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  EXPECT_EQ(Health(channel, "s3cret-all"), HealthStatus::NOT_SERVING);
  EXPECT_EQ(ServerInfo(channel, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(server->LoadEngine().ok());
  EXPECT_TRUE(ServerInfo(channel, "s3cret-all").ok());
  EXPECT_TRUE(UpdateOptions(channel, "s3cret-all").ok());

  // /metrics over HTTPS with the same token.
  httplib::SSLClient http("127.0.0.1", server->metrics_port());
  http.set_ca_cert_path(kData + "ca.pem");
  http.enable_server_certificate_verification(true);
  httplib::Result plain = http.Get("/metrics");
  ASSERT_TRUE(plain) << httplib::to_string(plain.error());
  EXPECT_EQ(plain->status, 401);
  httplib::Result ok = http.Get("/metrics", {{"Authorization", "Bearer s3cret-all"}});
  ASSERT_TRUE(ok) << httplib::to_string(ok.error());
  EXPECT_EQ(ok->status, 200);
  EXPECT_NE(ok->body.find("saturn:num_requests_running"), std::string::npos);
  // Plain HTTP gets nothing.
  httplib::Client insecure("127.0.0.1", server->metrics_port());
  httplib::Result no = insecure.Get("/metrics", {{"Authorization", "Bearer s3cret-all"}});
  EXPECT_TRUE(!no || no->status != 200);

  // The OpenAI-compatible API: HTTPS with the same certificate, the same token.
  httplib::SSLClient api("127.0.0.1", server->http_port());
  api.set_ca_cert_path(kData + "ca.pem");
  api.enable_server_certificate_verification(true);
  const std::string body = R"({"prompt": [1, 2], "max_tokens": 2, "ignore_eos": true})";
  httplib::Result refused = api.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(refused) << httplib::to_string(refused.error());
  EXPECT_EQ(refused->status, 401);
  EXPECT_NE(refused->body.find("authentication_error"), std::string::npos) << refused->body;
  httplib::Result done = api.Post("/v1/completions", {{"Authorization", "Bearer s3cret-all"}}, body,
                                  "application/json");
  ASSERT_TRUE(done) << httplib::to_string(done.error());
  EXPECT_EQ(done->status, 200) << done->body;
  EXPECT_NE(done->body.find("\"completion_tokens\":2"), std::string::npos) << done->body;
  httplib::Client plain_api("127.0.0.1", server->http_port());
  httplib::Result plain_no = plain_api.Post(
      "/v1/completions", {{"Authorization", "Bearer s3cret-all"}}, body, "application/json");
  EXPECT_TRUE(!plain_no || plain_no->status != 200);
}

TEST(SecurityTest, TheAdminListCoversRecalibrate) {
  EXPECT_TRUE(MethodNeedsToken("/saturn.v1.Saturn/UpdateEngineOptions", "admin"));
  EXPECT_TRUE(MethodNeedsToken("/saturn.v1.Diagnostics/Recalibrate", "admin"));
  EXPECT_FALSE(MethodNeedsToken("/saturn.v1.Saturn/Generate", "admin"));
  EXPECT_FALSE(MethodNeedsToken("/grpc.health.v1.Health/Check", "admin"));
  EXPECT_TRUE(MethodNeedsToken("/grpc.health.v1.Health/Check", "all"));
  EXPECT_TRUE(BearerMatches("Bearer abc", "abc"));
  EXPECT_TRUE(BearerMatches("bearer abc", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abd", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(BearerMatches("abc", "abc"));
}

TEST(SecurityTest, ConfigurationErrorsNameTheFlag) {
  struct Case {
    std::function<void(ServerConfig*)> set;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {[](ServerConfig* c) { c->tls_cert = kData + "server.pem"; }, "--tls_key"},
      {[](ServerConfig* c) { c->tls_client_ca = kData + "ca.pem"; }, "--tls_client_ca"},
      {[](ServerConfig* c) { c->auth_scope = "everything"; }, "--auth_scope"},
      {[](ServerConfig* c) { c->auth_scope = "all"; }, "--auth_token_file"},
      {[](ServerConfig* c) {
         c->listen = "0.0.0.0:0";
         c->auth_token_file = TokenFile("x");
       },
       "--tls_cert"},
  };
  for (const Case& k : cases) {
    ServerConfig c = testing::TinyConfig();
    k.set(&c);
    const absl::Status st = c.Validate();
    EXPECT_FALSE(st.ok()) << k.flag;
    EXPECT_NE(st.message().find(k.flag), std::string::npos) << st;
  }
  // Unreadable or unusable files fail StartListening, naming the flag.
  ServerConfig c = testing::TinyConfig();
  c.auth_token_file = TokenFile("");
  absl::Status st = ServerApp(c).StartListening();
  EXPECT_NE(st.message().find("--auth_token_file"), std::string::npos) << st;
  c = TlsConfig();
  c.tls_key = kData + "missing.key";
  st = ServerApp(c).StartListening();
  EXPECT_NE(st.message().find("--tls_key"), std::string::npos) << st;
}

TEST(SecurityTest, WarnsWhenListeningBeyondLoopbackUnprotected) {
  ServerConfig c = testing::TinyConfig();
  EXPECT_TRUE(SecurityWarnings(c).empty());
  c.listen = "0.0.0.0:50051";
  std::vector<std::string> w = SecurityWarnings(c);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("TLS"), std::string::npos);
  EXPECT_NE(w[1].find("--auth_token_file"), std::string::npos);
  c.tls_cert = "cert";
  c.tls_key = "key";
  c.auth_token_file = "token";
  EXPECT_TRUE(SecurityWarnings(c).empty());
}

}  // namespace
}  // namespace saturn
