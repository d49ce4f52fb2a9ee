// The fleet view of saturn-diag get (see fleet.h): per-replica reports side by side and
// the comparison rules, in the order they are tried:
//   1. some replica saturated (requests waiting, or COMPUTE_BOUND) while another is idle or
//      UNDERLOADED                                   -> IMBALANCED: spread the load evenly
//   2. some replica busy (not UNDERLOADED) with over 1.5x + 1 the in-flight requests of one
//      that is idle or UNDERLOADED                   -> IMBALANCED
//   3. every replica saturated                      -> SATURATED: add replicas
//   4. every replica idle or UNDERLOADED            -> UNDERLOADED: fewer replicas / more load
//   5. otherwise                                    -> BALANCED
// Uneven in-flight counts alone are not flagged: round_robin sends equal request rates, so a
// slower replica holds more in flight by Little's law, and while no replica is at its limit
// moving requests between replicas buys nothing.
#include "clients/diag/fleet.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "proto/render/report_json.h"
#include "proto/render/report_text.h"

namespace saturn::clients {
namespace {

constexpr double kUnevenRatio = 1.5;  // in-flight ratio beyond which load counts as uneven
constexpr double kUnevenSlack = 1.0;  // ... plus one request, so 0 vs 1 is not "uneven"

bool Idle(const v1::DiagnosticsReport& r) { return r.profile().steps() == 0; }

// Has spare capacity: idle, or UNDERLOADED without a queue (a short window can read
// UNDERLOADED by idle share while requests waited within it).
bool Underloaded(const v1::DiagnosticsReport& r) {
  return Idle(r) ||
         (r.bottleneck() == v1::BOTTLENECK_UNDERLOADED && r.profile().mean_queue_depth() < 0.5);
}

std::string State(const ReplicaReport& x) {
  const v1::DiagnosticsReport& r = x.report;
  if (Idle(r)) return "idle (no steps in the window)";
  std::string s = BottleneckName(r.bottleneck());
  if (r.profile().mean_queue_depth() >= 0.5) {
    absl::StrAppendFormat(&s, " with %.1f requests waiting (up to %d)",
                          r.profile().mean_queue_depth(), r.profile().max_queue_depth());
  } else {
    absl::StrAppendFormat(&s, " at batch %.1f", r.profile().mean_batch_seqs());
  }
  return s;
}

constexpr char kBalancers[] =
    "balance every client over all replicas: gRPC client-side round_robin "
    "(saturn-load --target a,b does this), or an Envoy cluster with lb_policy ROUND_ROBIN / "
    "LEAST_REQUEST (least-request evens out uneven request lengths; docs/FLEET.md)";

}  // namespace

double ReplicaLoad(const v1::DiagnosticsReport& r) {
  return r.profile().mean_running() + r.profile().mean_queue_depth();
}

bool ReplicaSaturated(const v1::DiagnosticsReport& r) {
  if (Idle(r)) return false;
  // A request waiting now and then is not saturation; half a request on average is.
  return r.profile().mean_queue_depth() >= 0.5 || r.bottleneck() == v1::BOTTLENECK_COMPUTE_BOUND;
}

FleetVerdict AnalyzeFleet(const std::vector<ReplicaReport>& replicas) {
  FleetVerdict v;
  std::vector<const ReplicaReport*> ok;
  for (const ReplicaReport& x : replicas) {
    if (x.ok) ok.push_back(&x);
  }
  if (ok.size() < 2) {
    v.kind = "INCOMPLETE";
    v.why = absl::StrCat(ok.size(), " of ", replicas.size(),
                         " replicas answered; a fleet comparison needs two");
    return v;
  }
  const auto load = [](const ReplicaReport* x) { return ReplicaLoad(x->report); };
  const auto [lo_it, hi_it] = std::minmax_element(
      ok.begin(), ok.end(), [&](auto* a, auto* b) { return load(a) < load(b); });
  const ReplicaReport *lo = *lo_it, *hi = *hi_it;
  double total = 0, running = 0;
  for (const ReplicaReport* x : ok) {
    total += load(x);
    running += x->report.profile().mean_running();
  }
  const double even = total / ok.size();
  v.load_ratio = load(lo) > 0 ? load(hi) / load(lo) : (load(hi) > 0 ? INFINITY : 1);
  std::vector<std::string> loads;
  loads.reserve(ok.size());
  for (const ReplicaReport* x : ok) loads.push_back(absl::StrFormat("%s %.1f", x->target, load(x)));
  const std::string now = absl::StrCat("in-flight requests now: ", absl::StrJoin(loads, ", "));

  const ReplicaReport* saturated = nullptr;
  const ReplicaReport* spare = nullptr;
  for (const ReplicaReport* x : ok) {
    if (ReplicaSaturated(x->report) && (saturated == nullptr || load(x) > load(saturated))) {
      saturated = x;
    }
    if (Underloaded(x->report) && (spare == nullptr || load(x) < load(spare))) spare = x;
  }
  if (saturated != nullptr && spare != nullptr) {
    v.kind = "IMBALANCED";
    v.why = absl::StrFormat(
        "%s is %s while %s is %s: the load balancer, not capacity, limits "
        "the fleet (%s)",
        saturated->target, State(*saturated), spare->target, State(*spare), now);
    v.action = absl::StrFormat("%s; evened out, each replica runs about %.1f in-flight requests",
                               kBalancers, even);
    return v;
  }
  if (!Underloaded(hi->report) && Underloaded(lo->report) &&
      load(hi) > kUnevenRatio * load(lo) + kUnevenSlack) {
    v.kind = "IMBALANCED";
    v.why = absl::StrFormat("%s carries %.1f in-flight requests, %s only %.1f (%s is %s, %s is %s)",
                            hi->target, load(hi), lo->target, load(lo), hi->target, State(*hi),
                            lo->target, State(*lo));
    v.action = absl::StrFormat("%s; evened out, each replica runs about %.1f in-flight requests",
                               kBalancers, even);
    return v;
  }
  const bool all_saturated = std::all_of(
      ok.begin(), ok.end(), [](const ReplicaReport* x) { return ReplicaSaturated(x->report); });
  if (all_saturated) {
    // Each replica holds about its current running batch; the waiting requests need more.
    const double per_replica = std::max(running / ok.size(), 1.0);
    const int needed = static_cast<int>(std::ceil(total / per_replica - 1e-9));
    v.kind = "SATURATED";
    v.why = absl::StrFormat(
        "every replica has requests waiting or runs at its compute ceiling "
        "(%s)",
        now);
    v.action = needed > static_cast<int>(ok.size())
                   ? absl::StrFormat(
                         "add replicas: at about %.1f running requests each, the "
                         "%.1f in flight need %d replicas (now %d)",
                         per_replica, total, needed, ok.size())
                   : "add replicas, or raise max_num_seqs where the replica's plan says so";
    return v;
  }
  const bool all_under = std::all_of(ok.begin(), ok.end(),
                                     [](const ReplicaReport* x) { return Underloaded(x->report); });
  if (all_under) {
    // How many replicas the in-flight requests fill at the smallest plateau batch reported.
    int plateau = 0;
    for (const ReplicaReport* x : ok) {
      const int p = x->report.plateau_batch();
      if (p > 0) plateau = plateau == 0 ? p : std::min(plateau, p);
    }
    v.kind = "UNDERLOADED";
    v.why = absl::StrCat("every replica is idle or UNDERLOADED (", now, ")");
    if (plateau > 0) {
      const int k = std::max(1, static_cast<int>(std::ceil(total / plateau - 1e-9)));
      v.action =
          k < static_cast<int>(ok.size())
              ? absl::StrFormat(
                    "the %.1f in-flight requests fit in %d replica(s) at the plateau "
                    "batch of %d: remove %d replica(s), or send more load",
                    total, k, plateau, ok.size() - k)
              : "send more load (raise client concurrency); each replica's plan says how much";
    } else {
      v.action = "send more load (raise client concurrency); each replica's plan says how much";
    }
    return v;
  }
  v.kind = "BALANCED";
  v.why = absl::StrCat("no replica waits on another's spare capacity (", now, ")");
  return v;
}

std::string RenderFleet(const std::vector<ReplicaReport>& replicas, const FleetVerdict& v,
                        double window_s) {
  std::ostringstream o;
  o << absl::StrFormat("fleet      %d replicas, last %.1f s\n", replicas.size(), window_s);
  o << absl::StrFormat("  %-22s %-14s %-14s %8s %6s %7s %6s %6s %6s %5s\n", "replica", "verdict",
                       "steps", "tok/s", "batch", "waiting", "busy", "MFU", "MBU", "KV");
  for (const ReplicaReport& x : replicas) {
    if (!x.ok) {
      o << absl::StrFormat("  %-22s UNREACHABLE    %s\n", x.target, x.error);
      continue;
    }
    const v1::DiagnosticsReport& r = x.report;
    const v1::Profile& p = r.profile();
    o << absl::StrFormat("  %-22s %-14s %-14s %8.1f %6.1f %7.1f %5.0f%% %5.1f%% %5.1f%% %4.0f%%\n",
                         x.target, BottleneckName(r.bottleneck()),
                         Idle(r) ? "-" : BottleneckName(r.step_bound()), p.tokens_per_s(),
                         p.mean_batch_seqs(), p.mean_queue_depth(), 100 * p.busy_fraction(),
                         100 * p.mfu(), 100 * p.mbu(), 100 * p.kv_usage());
  }
  for (const ReplicaReport& x : replicas) {
    if (!x.ok) continue;
    o << "  " << x.target << ": "
      << (x.report.summary().empty() ? BottleneckName(x.report.bottleneck()) : x.report.summary());
    if (x.report.plan_size() > 0) o << "; plan: " << x.report.plan(0).what();
    o << "\n";
  }
  o << absl::StrFormat("%-10s %s: %s\n", "verdict", v.kind, v.why);
  if (!v.action.empty()) o << absl::StrFormat("%-10s %s\n", "change", v.action);
  return o.str();
}

std::string FleetJson(const std::vector<ReplicaReport>& replicas, const FleetVerdict& v,
                      double window_s) {
  nlohmann::json j;
  j["window_seconds"] = window_s;
  j["replicas"] = nlohmann::json::array();
  for (const ReplicaReport& x : replicas) {
    nlohmann::json r = {{"target", x.target}, {"ok", x.ok}};
    if (x.ok) {
      r["report"] = nlohmann::json::parse(ReportJson(x.report, false));
      r["in_flight"] = ReplicaLoad(x.report);
      r["saturated"] = ReplicaSaturated(x.report);
    } else {
      r["error"] = x.error;
    }
    j["replicas"].push_back(r);
  }
  j["fleet"] = {{"kind", v.kind},
                {"why", v.why},
                {"action", v.action},
                {"load_ratio", std::isfinite(v.load_ratio) ? nlohmann::json(v.load_ratio)
                                                           : nlohmann::json(nullptr)}};
  return j.dump(2) + "\n";
}

int RunFleetGet(const DiagOptions& o, const std::shared_ptr<const ChannelSecurity>& security,
                std::ostream& out, std::ostream& err) {
  std::vector<ReplicaReport> replicas;
  for (absl::string_view t : absl::StrSplit(o.target, ',', absl::SkipWhitespace())) {
    ReplicaReport x;
    x.target = std::string(absl::StripAsciiWhitespace(t));
    DiagOptions one = o;
    one.target = x.target;
    absl::StatusOr<DiagClient> c = DiagClient::Connect(one, security);
    absl::StatusOr<v1::DiagnosticsReport> r =
        c.ok() ? c->Report(o.window_s) : absl::StatusOr<v1::DiagnosticsReport>(c.status());
    if (r.ok()) {
      x.ok = true;
      x.report = *std::move(r);
      x.model = c->info().model().name();
      x.max_num_seqs = c->info().options().max_num_seqs();
    } else {
      x.error = std::string(r.status().message());
      err << "saturn-diag get: " << x.error << "\n";
    }
    replicas.push_back(std::move(x));
  }
  const FleetVerdict v = AnalyzeFleet(replicas);
  out << (o.json ? FleetJson(replicas, v, o.window_s) : RenderFleet(replicas, v, o.window_s));
  const bool all_ok =
      std::all_of(replicas.begin(), replicas.end(), [](const ReplicaReport& x) { return x.ok; });
  return all_ok ? kDiagExitOk : kDiagExitFailed;
}

}  // namespace saturn::clients
