// The fleet verdict of saturn-diag get --target a,b,c on hand-made replica reports: a queueing
// replica beside an idle one is IMBALANCED (naming both and the balancer change), a busy one
// beside an underloaded one too (uneven counts alone are not), all queueing is SATURATED (add
// replicas), all underloaded is UNDERLOADED (fewer replicas), similar loads are BALANCED, one
// answer is INCOMPLETE; the rendering and the JSON carry the same verdict.
#include <gtest/gtest.h>

#include "clients/diag/fleet.h"
#include "nlohmann/json.hpp"

namespace saturn::clients {
namespace {

ReplicaReport Replica(const std::string& target, v1::Bottleneck b, double running, double waiting,
                      int steps = 100, int plateau_batch = 0) {
  ReplicaReport x;
  x.target = target;
  x.ok = true;
  x.report.set_bottleneck(b);
  x.report.set_step_bound(b == v1::BOTTLENECK_UNDERLOADED ? v1::BOTTLENECK_MEMORY_BOUND : b);
  x.report.set_summary(std::string("summary of ") + target);
  x.report.set_plateau_batch(plateau_batch);
  v1::Profile* p = x.report.mutable_profile();
  p->set_steps(steps);
  p->set_mean_running(running);
  p->set_mean_batch_seqs(running);
  p->set_mean_queue_depth(waiting);
  p->set_max_queue_depth(static_cast<int>(waiting + 0.999));
  p->set_tokens_per_s(10 * running);
  return x;
}

TEST(FleetVerdictTest, ComputeBoundBesideIdleIsImbalancedAndNamesTheFix) {
  const std::vector<ReplicaReport> fleet = {
      Replica("a:1", v1::BOTTLENECK_COMPUTE_BOUND, 8, 6),
      Replica("b:2", v1::BOTTLENECK_UNDERLOADED, 0, 0, /*steps=*/0)};
  const FleetVerdict v = AnalyzeFleet(fleet);
  EXPECT_EQ(v.kind, "IMBALANCED");
  EXPECT_NE(v.why.find("a:1 is COMPUTE_BOUND with 6.0 requests waiting (up to 6)"),
            std::string::npos)
      << v.why;
  EXPECT_NE(v.why.find("b:2 is idle"), std::string::npos) << v.why;
  EXPECT_NE(v.action.find("round_robin"), std::string::npos) << v.action;
  EXPECT_NE(v.action.find("about 7.0 in-flight requests"), std::string::npos) << v.action;
  const std::string text = RenderFleet(fleet, v, 30);
  EXPECT_NE(text.find("verdict    IMBALANCED"), std::string::npos) << text;
  EXPECT_NE(text.find("change     "), std::string::npos) << text;
  EXPECT_NE(text.find("a:1: summary of a:1"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(FleetJson(fleet, v, 30));
  EXPECT_EQ(j["fleet"]["kind"], "IMBALANCED");
  EXPECT_EQ(j["replicas"].size(), 2u);
  EXPECT_EQ(j["replicas"][0]["saturated"], true);
  EXPECT_EQ(j["replicas"][1]["in_flight"], 0.0);
  EXPECT_TRUE(j["fleet"]["load_ratio"].is_null());  // infinite: one replica carries nothing
}

TEST(FleetVerdictTest, BusyBesideUnderloadedIsImbalancedUnevenBusyPairIsNot) {
  const FleetVerdict v = AnalyzeFleet({Replica("a", v1::BOTTLENECK_MEMORY_BOUND, 12, 0),
                                       Replica("b", v1::BOTTLENECK_UNDERLOADED, 3, 0)});
  EXPECT_EQ(v.kind, "IMBALANCED");
  EXPECT_NEAR(v.load_ratio, 4.0, 1e-9);
  EXPECT_NE(v.why.find("a carries 12.0 in-flight requests, b only 3.0"), std::string::npos)
      << v.why;
  // Both busy, neither waiting: moving requests buys nothing (round_robin's equal rates give
  // the slower replica more in flight).
  EXPECT_EQ(AnalyzeFleet({Replica("a", v1::BOTTLENECK_MEMORY_BOUND, 12, 0),
                          Replica("b", v1::BOTTLENECK_MEMORY_BOUND, 3, 0)})
                .kind,
            "BALANCED");
  // Two underloaded replicas with uneven counts: the fleet is underloaded, not imbalanced.
  EXPECT_EQ(AnalyzeFleet({Replica("a", v1::BOTTLENECK_UNDERLOADED, 3.1, 0),
                          Replica("b", v1::BOTTLENECK_UNDERLOADED, 1.0, 0)})
                .kind,
            "UNDERLOADED");
}

TEST(FleetVerdictTest, EveryReplicaQueueingNeedsMoreReplicas) {
  const FleetVerdict v = AnalyzeFleet({Replica("a", v1::BOTTLENECK_COMPUTE_BOUND, 8, 8),
                                       Replica("b", v1::BOTTLENECK_COMPUTE_BOUND, 8, 8)});
  EXPECT_EQ(v.kind, "SATURATED");
  // 32 in flight at 8 running each: 4 replicas.
  EXPECT_NE(v.action.find("need 4 replicas (now 2)"), std::string::npos) << v.action;
  // A short window can call a replica UNDERLOADED (idle share) while requests waited in it:
  // that replica has no spare capacity to offer the other.
  const FleetVerdict w = AnalyzeFleet({Replica("a", v1::BOTTLENECK_COMPUTE_BOUND, 2, 1.6),
                                       Replica("b", v1::BOTTLENECK_UNDERLOADED, 2, 2.4)});
  EXPECT_EQ(w.kind, "SATURATED") << w.why;
}

TEST(FleetVerdictTest, EveryReplicaUnderloadedFitsInFewer) {
  const FleetVerdict v = AnalyzeFleet({Replica("a", v1::BOTTLENECK_UNDERLOADED, 2, 0, 100, 16),
                                       Replica("b", v1::BOTTLENECK_UNDERLOADED, 2, 0, 100, 20),
                                       Replica("c", v1::BOTTLENECK_UNDERLOADED, 1.5, 0, 100, 16)});
  EXPECT_EQ(v.kind, "UNDERLOADED");
  EXPECT_NE(v.action.find("fit in 1 replica(s) at the plateau batch of 16: remove 2"),
            std::string::npos)
      << v.action;
}

TEST(FleetVerdictTest, SimilarLoadsAreBalancedAndOneAnswerIsIncomplete) {
  EXPECT_EQ(AnalyzeFleet({Replica("a", v1::BOTTLENECK_MEMORY_BOUND, 6, 0),
                          Replica("b", v1::BOTTLENECK_MEMORY_BOUND, 5, 0)})
                .kind,
            "BALANCED");
  ReplicaReport down;
  down.target = "c";
  down.error = "unreachable";
  const std::vector<ReplicaReport> fleet = {Replica("a", v1::BOTTLENECK_MEMORY_BOUND, 6, 0), down};
  const FleetVerdict v = AnalyzeFleet(fleet);
  EXPECT_EQ(v.kind, "INCOMPLETE");
  EXPECT_NE(RenderFleet(fleet, v, 10).find("c                      UNREACHABLE    unreachable"),
            std::string::npos)
      << RenderFleet(fleet, v, 10);
}

}  // namespace
}  // namespace saturn::clients
