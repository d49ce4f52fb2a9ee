// saturn-diag and saturn-load against real saturn-server processes started with the security
// flags (docs/SECURITY.md; the tools' side is clients/common/channel_security.h): with the right CA
// and token every command works (diag info/get/watch/trace, the fleet get, load with its
// diagnosis fetch), mutual TLS needs --tls_cert/--tls_key, a wrong token is UNAUTHENTICATED
// in the tool's output, a plaintext client of a TLS server is told to pass --tls_ca, the
// token reaches the admin RPC on a plaintext loopback server, and bad security flags exit 2
// naming the flag. The certificates are the test-only ones in tests/server/testdata.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/clients/server_process.h"

namespace saturn::clients {
namespace {

using testing::kDiagBinary;
using testing::kLoadBinary;
using testing::kServerBinary;
using testing::Spawned;
using testing::StartServer;
using testing::ToolRun;

const std::string kData = std::string(SATURN_SOURCE_DIR) + "/tests/server/testdata/";

std::string Dir() {
  static const std::string dir = testing::MakeProcessDir("saturn_client_security_");
  return dir;
}

std::string TokenFile(const std::string& token) {
  std::string path = Dir() + "/token-" + token;
  std::ofstream(path) << token << "\n";
  return path;
}

ToolRun Diag(const std::string& args) { return testing::RunTool(kDiagBinary, args, Dir(), "diag"); }
ToolRun Load(const std::string& args) { return testing::RunTool(kLoadBinary, args, Dir(), "load"); }

const std::string kCa = " --tls_ca=" + kData + "ca.pem";
const std::string kClientCert =
    " --tls_cert=" + kData + "client.pem --tls_key=" + kData + "client.key";

class ClientSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(access(kServerBinary.c_str(), X_OK), 0) << "build saturn-server: " << kServerBinary;
    ASSERT_EQ(access(kDiagBinary.c_str(), X_OK), 0) << "build saturn-diag: " << kDiagBinary;
    ASSERT_EQ(access(kLoadBinary.c_str(), X_OK), 0) << "build saturn-load: " << kLoadBinary;
    // TLS, and the token on every RPC.
    tls_ = new Spawned(
        StartServer(Dir() + "/tls-server.log",
                    {"--tls_cert=" + kData + "server.pem", "--tls_key=" + kData + "server.key",
                     "--auth_token_file=" + TokenFile("s3cret-all"), "--auth_scope=all"}));
  }
  static void TearDownTestSuite() {
    testing::StopServer(tls_);
    delete tls_;
    tls_ = nullptr;
  }
  void SetUp() override {
    if (tls_ == nullptr || tls_->address.empty()) GTEST_SKIP() << "the TLS server did not start";
  }
  // --target and the tool's own timeout flag.
  static std::string Target(bool load = false) {
    return " --target " + tls_->address + (load ? " --connect_timeout 20" : " --timeout 20");
  }
  static std::string Good(bool load = false) {
    return Target(load) + kCa + " --auth_token_file=" + TokenFile("s3cret-all");
  }

  static Spawned* tls_;
};

Spawned* ClientSecurityTest::tls_ = nullptr;

TEST_F(ClientSecurityTest, LoadAndItsDiagnosisWorkWithTheCaAndToken) {
  ToolRun r = Load(Good(true) +
                   " --concurrency 2 --num_requests 6 --min_measure_s 0 --input_len 8 "
                   "--output_len 4 --progress=false --json " +
                   Dir() + "/load.json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string json = testing::ReadFile(Dir() + "/load.json");
  EXPECT_NE(json.find("\"completed\""), std::string::npos) << json.substr(0, 2000);
  // The diagnosis is fetched over the same secured channel (Diagnostics is token-guarded here).
  EXPECT_NE(json.find("\"diagnosis_note\": \"\""), std::string::npos) << json.substr(0, 4000);
  EXPECT_EQ(json.find("\"diagnosis\": []"), std::string::npos) << json.substr(0, 4000);
  // Several targets: the balanced channel and the per-target ones all carry the credentials.
  r = Load(" --target " + tls_->address + "," + tls_->address + " --connect_timeout 20" + kCa +
           " --auth_token_file=" + TokenFile("s3cret-all") +
           " --concurrency 2 --num_requests 4 --min_measure_s 0 --output_len 2 --progress=false");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // Different host names on one TLS channel need the one name to check.
  const std::string port = tls_->address.substr(tls_->address.rfind(':'));
  const std::string mixed = " --target 127.0.0.1" + port + ",localhost" + port +
                            " --connect_timeout 20" + kCa +
                            " --auth_token_file=" + TokenFile("s3cret-all") +
                            " --num_requests 2 --min_measure_s 0 --output_len 2 --progress=false";
  r = Load(mixed);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--tls_server_name"), std::string::npos) << r.err;
  r = Load(mixed + " --tls_server_name=localhost");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

TEST_F(ClientSecurityTest, EveryDiagCommandWorksWithTheCaAndToken) {
  ToolRun r = Diag("info" + Good());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tiny"), std::string::npos) << r.out;
  r = Diag("get --json --window 60" + Good());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"bottleneck\""), std::string::npos) << r.out;
  r = Diag("watch --count 2 --interval_ms 100" + Good());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Diag("trace -o " + Dir() + "/trace.json" + Good());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(testing::ReadFile(Dir() + "/trace.json").find("traceEvents"), std::string::npos);
  // The fleet view opens one channel per replica, each with the same credentials.
  r = Diag("get --target " + tls_->address + "," + tls_->address + " --timeout 20" + kCa +
           " --auth_token_file=" + TokenFile("s3cret-all"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // --tls_server_name: the certificate names localhost (and 127.0.0.1); any other name fails.
  r = Diag("info" + Good() + " --tls_server_name=localhost");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Diag("info" + Good() + " --tls_server_name=not-the-server --timeout 3");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--tls_server_name"), std::string::npos) << r.err;
}

TEST_F(ClientSecurityTest, AWrongOrMissingTokenIsUnauthenticated) {
  for (const std::string& token : {" --auth_token_file=" + TokenFile("wrong"), std::string()}) {
    ToolRun r = Diag(absl::StrCat("info", Target(), kCa, token));
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
    r = Load(absl::StrCat(Target(true), kCa, token,
                          " --num_requests 1 --min_measure_s 0 --progress=false"));
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
  }
}

TEST_F(ClientSecurityTest, APlaintextClientIsToldToPassTheCa) {
  const std::string plain = " --target " + tls_->address + " --timeout 3" +
                            " --auth_token_file=" + TokenFile("s3cret-all");
  ToolRun r = Diag("info" + plain);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot connect"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--tls_ca"), std::string::npos) << r.err;
  r = Load(plain.substr(0, plain.find(" --timeout")) + " --connect_timeout 3" +
           " --num_requests 1 --min_measure_s 0 --progress=false");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--tls_ca"), std::string::npos) << r.err;
}

TEST(ClientSecurityFlagsTest, MutualTlsNeedsTheClientCertificate) {
  Spawned server = StartServer(Dir() + "/mtls-server.log", {"--tls_cert=" + kData + "server.pem",
                                                            "--tls_key=" + kData + "server.key",
                                                            "--tls_client_ca=" + kData + "ca.pem"});
  ASSERT_FALSE(server.address.empty());
  const std::string target = " --target " + server.address;
  ToolRun r = Diag("info --timeout 20" + target + kCa + kClientCert);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Load(target + " --connect_timeout 20" + kCa + kClientCert +
           " --num_requests 2 --min_measure_s 0 --output_len 2 --progress=false");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Diag("info --timeout 3" + target + kCa);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--tls_cert and --tls_key"), std::string::npos) << r.err;
  testing::StopServer(&server);
}

// A token without TLS: the server gates the admin RPCs behind gRPC's local credentials, and
// the tools send the token in plaintext over loopback.
TEST(ClientSecurityFlagsTest, TheTokenReachesTheAdminRpcOnPlaintextLoopback) {
  Spawned server =
      StartServer(Dir() + "/token-server.log", {"--auth_token_file=" + TokenFile("s3cret-admin")});
  ASSERT_FALSE(server.address.empty());
  const std::string target = " --target " + server.address + " --timeout 60";
  ToolRun r = Diag("recalibrate" + target + " --auth_token_file=" + TokenFile("wrong"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Recalibrate"), std::string::npos) << r.err;
  r = Diag("recalibrate" + target + " --auth_token_file=" + TokenFile("s3cret-admin"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  testing::StopServer(&server);
}

TEST(ClientSecurityFlagsTest, BadSecurityFlagsExit2NamingTheFlag) {
  struct Case {
    std::string args, flag;
  };
  const std::string missing = Dir() + "/missing.pem";
  const std::vector<Case> cases = {
      {" --tls_key=" + kData + "client.key" + kCa, "--tls_cert"},
      {" --tls_cert=" + kData + "client.pem" + kCa, "--tls_key"},
      {" --tls_cert=" + kData + "client.pem --tls_key=" + kData + "client.key", "--tls_ca"},
      {" --tls_server_name=localhost", "--tls_ca"},
      {" --tls_ca=" + missing, "--tls_ca"},
      {" --tls_ca=" + kData + "README.md", "--tls_ca"},  // not PEM
      {kCa + " --tls_cert=" + missing + " --tls_key=" + kData + "client.key", "--tls_cert"},
      {" --auth_token_file=" + missing, "--auth_token_file"},
      {" --auth_token_file=" + TokenFile(""), "--auth_token_file"},  // empty
  };
  // Nothing listens on port 1: a tool that got past its flags would fail to connect (exit 1).
  for (const Case& k : cases) {
    for (const bool load : {false, true}) {
      const ToolRun r =
          load ? Load("--target 127.0.0.1:1 --connect_timeout 1 --progress=false" + k.args)
               : Diag("info --target 127.0.0.1:1 --timeout 1" + k.args);
      EXPECT_EQ(r.code, 2) << (load ? "saturn-load" : "saturn-diag") << k.args << "\n" << r.err;
      EXPECT_NE(r.err.find(k.flag), std::string::npos) << k.args << "\n" << r.err;
    }
  }
}

}  // namespace
}  // namespace saturn::clients
