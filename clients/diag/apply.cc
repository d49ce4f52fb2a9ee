// saturn-diag apply (see commands.h): read the current plan, send its top action's
// engine options with UpdateEngineOptions, wait for the change to settle, and print what the
// server then measured beside what the plan predicted (the report's `tracked`).
//
// It never applies a client-side action (raise_client_concurrency: only the clients can send
// more requests) nor one that needs a restart (quantize_weights: restart_flags), and never sends an
// option the action leaves as it is, so the options in force afterwards are exactly the action's
// and the server can match the change to the plan.
#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/common/plan_options.h"
#include "clients/diag/commands.h"
#include "nlohmann/json.hpp"
#include "proto/render/report_json.h"
#include "proto/render/report_text.h"

namespace saturn::clients {
namespace {

using nlohmann::json;

json Parsed(const google::protobuf::Message& m) { return json::parse(ProtoJson(m, false)); }

void Sleep(double seconds, const std::atomic<bool>* interrupt) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  while (std::chrono::steady_clock::now() < end) {
    if (interrupt != nullptr && interrupt->load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int RunApply(const DiagOptions& o, const DiagClient& c, std::ostream& out, std::ostream& err,
             const std::atomic<bool>* interrupt) {
  absl::StatusOr<v1::DiagnosticsReport> before = c.Report(o.window_s);
  if (!before.ok()) return DiagFail(o, before.status(), err);
  json j = {{"target", c.target}, {"bottleneck", BottleneckName(before->bottleneck())}};
  auto done = [&](const std::string& text, const std::string& why) {
    if (o.json) {
      j["applied"] = false;
      j["reason"] = why;
      out << j.dump(2) << "\n";
    } else {
      out << text;
    }
    return kDiagExitOk;
  };

  if (before->plan().empty()) {
    const std::string note =
        before->plan_note().empty() ? "(no reason given)" : before->plan_note();
    return done(absl::StrCat("verdict ", BottleneckName(before->bottleneck()),
                             ": the plan has no action, nothing to apply: ", note, "\n"),
                absl::StrCat("no plan action: ", note));
  }
  const v1::PlanAction& a = before->plan(0);
  j["action"] = Parsed(a);
  if (a.kind() == "raise_client_concurrency") {
    return done(
        absl::StrFormat("top action: %s\nThis is a client-side change: the server is "
                        "waiting for requests, so only the clients can apply it (e.g. saturn-load "
                        "--concurrency=%.0f). Nothing was sent to the server.\n",
                        ActionLine(a), a.to()),
        "client-side action (raise_client_concurrency); nothing sent to the server");
  }

  if (!a.restart_flags().empty()) {
    return done(
        absl::StrFormat("top action: %s\nThis changes the weights' format, which no live option "
                        "can: restart the server with %s added to its flags (the weights are "
                        "requantized at load). Nothing was sent to the server.\n",
                        ActionLine(a), a.restart_flags()),
        absl::StrCat("needs a restart with ", a.restart_flags(), "; nothing sent to the server"));
  }

  v1::UpdateEngineOptionsRequest req;
  const std::string change = PlanOptionsRequest(a, c.info().options(), &req);
  j["request"] = Parsed(req);
  if (change.empty()) {
    return done(absl::StrCat("top action: ", ActionLine(a),
                             "\nIts options are already in force; nothing to send.\n"),
                "the action's options are already in force");
  }
  if (o.dry_run) {
    return done(absl::StrCat("top action: ", ActionLine(a), "\nwould send UpdateEngineOptions: ",
                             change, " (--dry_run: nothing sent)\n"),
                "--dry_run");
  }

  v1::UpdateEngineOptionsResponse resp;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(o.timeout_s * 1e6)));
    const grpc::Status s = c.conn->target_stub(0)->UpdateEngineOptions(&ctx, req, &resp);
    if (!s.ok()) return DiagFail(o, c.Error(s, "UpdateEngineOptions"), err);
  }
  const v1::EngineOptions& now = resp.options();
  j["applied"] = true;
  j["options"] = Parsed(now);
  if (!o.json) {
    out << "applied: " << ActionLine(a) << "\n"
        << absl::StrFormat(
               "sent %s; in force now: max_num_seqs %d, max_num_batched_tokens %d, "
               "cuda_graphs %s, prefix_caching %s, num_speculative_tokens %d\n",
               change, now.max_num_seqs(), now.max_num_batched_tokens(),
               now.cuda_graphs() ? "on" : "off", now.prefix_caching() ? "on" : "off",
               now.num_speculative_tokens())
        << absl::StrFormat("waiting %.1f s for the change to settle...\n", o.settle_s);
    out.flush();
  }
  Sleep(o.settle_s, interrupt);

  absl::StatusOr<v1::DiagnosticsReport> after = c.Report(std::max(o.window_s, o.settle_s));
  if (!after.ok()) return DiagFail(o, after.status(), err);
  j["bottleneck_after"] = BottleneckName(after->bottleneck());
  if (after->has_tracked()) {
    j["tracked"] = Parsed(after->tracked());
  } else {
    j["tracked"] = nullptr;
  }
  if (o.json) {
    out << j.dump(2) << "\n";
    return kDiagExitOk;
  }
  out << "verdict now " << BottleneckName(after->bottleneck()) << "\n";
  if (after->has_tracked()) {
    out << RenderTracked(after->tracked());
    if (!after->tracked().settled()) {
      out << "not settled yet: run `saturn-diag get` again later, under the same load\n";
    }
  } else {
    out << "no measured outcome yet: the server has run no steady decode steps since the "
           "change (is load still running?); run `saturn-diag get` later\n";
  }
  return kDiagExitOk;
}

}  // namespace saturn::clients
