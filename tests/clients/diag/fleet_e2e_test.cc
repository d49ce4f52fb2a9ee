// saturn-load and saturn-diag's fleet view against two real saturn-server replicas (the built
// binaries, tiny model, CPU backend, loopback ports): more load than one replica's batch
// limit sent to it alone is reported IMBALANCED, naming the queueing and the idle replica and
// the balancer change; the same overload spread by saturn-load over both (gRPC round_robin)
// reaches both, and no replica is reported idle.
// Needs the saturn-server, saturn-load and saturn-diag targets built.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "nlohmann/json.hpp"
#include "saturn/v1/saturn.grpc.pb.h"
#include "tests/clients/server_process.h"

namespace saturn::clients {
namespace {

using testing::kServerBinary;
using testing::Spawned;
using testing::ToolRun;

std::string Dir() {
  static const std::string dir = testing::MakeProcessDir("saturn_fleet_e2e_");
  return dir;
}

// Runs saturn-load; returns its wall time in seconds.
double Load(const std::string& targets, int concurrency, int requests) {
  const auto t0 = std::chrono::steady_clock::now();
  const ToolRun r =
      testing::RunTool(testing::kLoadBinary,
                       "--target=" + targets + " --concurrency=" + std::to_string(concurrency) +
                           " --num_requests=" + std::to_string(requests) +
                           " --input_len=16 --output_len=24 --warmup_requests=0 --progress=false",
                       Dir(), "load");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// UpdateEngineOptions(max_num_seqs) on one replica.
void SetMaxNumSeqs(const std::string& target, int n) {
  auto stub = v1::Saturn::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::UpdateEngineOptionsRequest req;
  req.set_max_num_seqs(n);
  v1::UpdateEngineOptionsResponse resp;
  const grpc::Status st = stub->UpdateEngineOptions(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.options().max_num_seqs(), n);
}

nlohmann::json Fleet(const std::string& targets, double window_s, std::string* text) {
  const std::string window = " --window=" + std::to_string(window_s);
  const ToolRun t =
      testing::RunTool(testing::kDiagBinary, "get --target=" + targets + window, Dir(), "diag");
  EXPECT_EQ(t.code, 0) << t.out << t.err;
  *text = t.out;
  const ToolRun j = testing::RunTool(testing::kDiagBinary,
                                     "get --json --target=" + targets + window, Dir(), "diag_json");
  EXPECT_EQ(j.code, 0) << j.err;
  return nlohmann::json::parse(j.out, nullptr, false);
}

TEST(FleetE2eTest, OneReplicaAloneIsImbalancedRoundRobinReachesBoth) {
  ASSERT_EQ(access(kServerBinary.c_str(), X_OK), 0) << "build saturn-server";
  ASSERT_EQ(access(testing::kLoadBinary.c_str(), X_OK), 0) << "build saturn-load";
  ASSERT_EQ(access(testing::kDiagBinary.c_str(), X_OK), 0) << "build saturn-diag";
  Spawned a = testing::StartServer(Dir() + "/a.log");
  Spawned b = testing::StartServer(Dir() + "/b.log");
  struct Stop {
    Spawned *a, *b;
    ~Stop() {
      testing::StopServer(a);
      testing::StopServer(b);
    }
  } stop{&a, &b};
  ASSERT_FALSE(a.address.empty());
  ASSERT_FALSE(b.address.empty());
  const std::string both = a.address + "," + b.address;

  // All load on a, twice its batch limit, so requests wait there while b stays idle.
  SetMaxNumSeqs(a.address, 2);
  double took = Load(a.address, 6, 18);
  std::string text;
  nlohmann::json j = Fleet(both, took + 1, &text);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["fleet"]["kind"], "IMBALANCED") << text;
  ASSERT_EQ(j["replicas"].size(), 2u);
  EXPECT_GT(j["replicas"][0]["in_flight"].get<double>(), 0.5) << text;
  EXPECT_EQ(j["replicas"][1]["in_flight"].get<double>(), 0.0) << text;
  EXPECT_NE(text.find("verdict    IMBALANCED: " + a.address), std::string::npos) << text;
  EXPECT_NE(text.find(b.address + " is idle"), std::string::npos) << text;
  EXPECT_NE(text.find("requests waiting"), std::string::npos) << text;
  EXPECT_NE(text.find("round_robin"), std::string::npos) << text;

  // Twice the fleet's batch limit again, now spread by saturn-load over both replicas (gRPC
  // round_robin): both serve and neither is idle. (Round robin evens request rates, not
  // in-flight counts: where one replica runs slower, here because both share two cores, it
  // holds more requests and the fleet line may still say so; that is not asserted.)
  SetMaxNumSeqs(b.address, 2);
  took = Load(both, 8, 96);
  j = Fleet(both, took + 0.2, &text);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(text.find(" is idle"), std::string::npos) << text;
  const std::string kind = j["fleet"]["kind"].get<std::string>();
  EXPECT_TRUE(kind == "SATURATED" || kind == "BALANCED" || kind == "IMBALANCED") << text;
  for (int i = 0; i < 2; ++i) {
    EXPECT_GT(j["replicas"][i]["report"]["profile"]["steps"].get<int>(), 0) << text;
    EXPECT_GT(j["replicas"][i]["in_flight"].get<double>(), 0.3) << text;
  }
}

}  // namespace
}  // namespace saturn::clients
