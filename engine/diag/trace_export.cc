// Trace export (trace_export.h). Times are rounded to 1 ns before clamping, so rounding can
// never push a child outside its parent.
#include "engine/diag/trace_export.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace saturn {
namespace {

constexpr int kPid = 1, kHostTid = 1, kDeviceTid = 2;

double R(double us) { return std::round(us * 1000.0) / 1000.0; }

// Appends children in order, each clamped to [lo, hi] and after the previous one.
class Track {
 public:
  Track(nlohmann::json* events, int tid) : events_(events), tid_(tid) {}
  // A slice [begin, end) clamped into [lo, hi] and not before `cursor_`.
  void Slice(const std::string& name, const char* cat, double begin, double end, double lo,
             double hi, nlohmann::json args = nullptr) {
    begin = R(std::clamp(std::max(begin, cursor_), lo, hi));
    end = R(std::clamp(end, begin, hi));
    nlohmann::json e = {{"name", name},          {"cat", cat},  {"ph", "X"},  {"ts", begin},
                        {"dur", R(end - begin)}, {"pid", kPid}, {"tid", tid_}};
    if (!args.is_null()) e["args"] = std::move(args);
    events_->push_back(std::move(e));
    cursor_ = end;
  }
  void Reset(double cursor) { cursor_ = cursor; }

 private:
  nlohmann::json* events_;
  int tid_;
  double cursor_ = 0;
};

nlohmann::json Meta(const char* what, int tid, const std::string& name) {
  nlohmann::json e = {{"name", what}, {"ph", "M"}, {"pid", kPid}, {"args", {{"name", name}}}};
  if (tid > 0) e["tid"] = tid;
  return e;
}

}  // namespace

std::string ExportChromeTrace(const std::vector<StepRecord>& steps, size_t max_steps) {
  const size_t first = max_steps > 0 && steps.size() > max_steps ? steps.size() - max_steps : 0;
  nlohmann::json events = nlohmann::json::array();
  events.push_back(Meta("process_name", 0, "saturn"));
  events.push_back(Meta("thread_name", kHostTid, "host"));
  events.push_back(Meta("thread_name", kDeviceTid, "device"));
  const double t0 = first < steps.size() ? steps[first].start_us : 0;
  Track host(&events, kHostTid), dev(&events, kDeviceTid);
  double host_cursor = 0, dev_cursor = 0;
  for (size_t i = first; i < steps.size(); ++i) {
    const StepRecord& r = steps[i];
    const double s = R(std::max(r.start_us - t0, host_cursor));
    const double e = R(std::max(r.end_us - t0, s));
    // Host track: the step, then its phases in the order they run.
    host.Reset(s);
    host.Slice(absl::StrCat("step ", r.step_id), "step", s, e, s, e,
               {{"seqs", r.num_seqs},
                {"prefill_tokens", r.num_prefill_tokens},
                {"decode_tokens", r.num_decode_tokens},
                {"queue_depth", r.queue_depth},
                {"graph_replayed", r.graph_replayed}});
    host.Reset(s);
    // Op times are relative to the backend's BeginStep, which follows scheduling.
    const double base = s + r.schedule_us;
    double issue_b = base + r.prepare_us, issue_e = issue_b + r.issue_us;
    if (!r.ops.empty()) {
      issue_b = base + r.ops.front().issue_begin_us;
      issue_e = base + r.ops.back().issue_end_us;
    }
    host.Slice("schedule", "host", s, s + r.schedule_us, s, e);
    host.Slice("prepare", "host", base, base + r.prepare_us, s, e);
    host.Slice("issue", "host", issue_b, issue_e, s, e,
               {{"ops", r.op_count}, {"issue_us", r.issue_us}});
    host.Slice("postprocess", "host", e - r.postprocess_us, e, s, e);
    host_cursor = e;

    // Device track: the step's device span, then each timed op inside it.
    double db = 0, de = 0;
    bool timed = false;
    for (const OpRecord& op : r.ops) {
      if (op.device_begin_us < 0) continue;
      if (!timed) db = op.device_begin_us, de = op.device_end_us;
      db = std::min(db, op.device_begin_us);
      de = std::max(de, op.device_end_us);
      timed = true;
    }
    if (!timed) db = issue_b - base, de = db + std::max(r.device_span_us, r.device_busy_us);
    const double ds = R(std::max(base + db, dev_cursor));
    const double dend = R(std::max(base + de, ds));
    dev.Reset(ds);
    dev.Slice(absl::StrCat("step ", r.step_id), "step", ds, dend, ds, dend,
              {{"flops", r.total_flops()},
               {"bytes", r.total_bytes()},
               {"busy_us", r.device_busy_us},
               {"per_op_timed", r.per_op_timed}});
    dev.Reset(ds);
    for (const OpRecord& op : r.ops) {
      if (op.device_begin_us < 0) continue;
      dev.Slice(OpKindName(op.kind), OpClassName(ClassOf(op.kind)), base + op.device_begin_us,
                base + op.device_end_us, ds, dend,
                {{"flops", op.cost.flops},
                 {"bytes", op.cost.bytes},
                 {"class", OpClassName(ClassOf(op.kind))}});
    }
    dev_cursor = dend;
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

}  // namespace saturn
