// The Generate stream reactor (grpc_transport.h). Each call's OnDone hands its record to the
// runner, which destroys the call later on its own thread, never inside OnDone: that is the
// pattern of gRPC's callback examples (OnDone signals, the owner destroys), and it means no gRPC
// thread is still tearing down a ClientContext after the phase returns and the caller goes on
// to drop the channels (a race that aborted a test process at exit with gRPC's
// "ref_counted.h: assertion failed: prior > 0").
#include "clients/load/grpc_transport.h"

#include <chrono>

#include "absl/strings/str_join.h"

namespace saturn::clients {
namespace {

double Since(LoadClock::time_point t0, LoadClock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

v1::GenerateRequest ToGenerate(const CallRequest& r) {
  v1::GenerateRequest req;
  if (!r.item.prompt_text.empty()) {
    req.set_prompt_text(r.item.prompt_text);
  } else {
    req.mutable_prompt_token_ids()->Add(r.item.prompt_token_ids.begin(),
                                        r.item.prompt_token_ids.end());
  }
  req.set_max_tokens(r.item.max_tokens);
  req.set_temperature(r.temperature);
  req.set_seed(r.seed);
  req.set_ignore_eos(r.ignore_eos);
  req.set_output_format(v1::OUTPUT_FORMAT_TOKENS);
  req.set_client_request_id(r.client_request_id);
  return req;
}

class GenerateCall : public StreamCall, public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  GenerateCall(v1::Saturn::Stub* stub, const CallRequest& r, LoadClock::time_point t0,
               CallDone done)
      : stub_(stub), req_(ToGenerate(r)), timeout_s_(r.timeout_s), t0_(t0), done_(std::move(done)) {
    rec_.index = r.index;
  }

  void Start() override {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(timeout_s_ * 1e6)));
    stub_->async()->Generate(&ctx_, &req_, this);
    StartRead(&msg_);
    rec_.send_s = Since(t0_, LoadClock::now());
    StartCall();
  }
  void Cancel() override { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream is over; OnDone follows
    const double now = Since(t0_, LoadClock::now());
    if (msg_.has_delta() && msg_.delta().token_ids_size() > 0) {
      rec_.token_times_s.push_back(now);
      rec_.token_counts.push_back(msg_.delta().token_ids_size());
      rec_.output_tokens += msg_.delta().token_ids_size();
    } else if (msg_.has_final()) {
      const v1::GenerateFinal& f = msg_.final();
      rec_.has_final = true;
      rec_.final_s = now;
      rec_.prompt_tokens = f.usage().prompt_tokens();
      rec_.server_queue_ms = static_cast<double>(f.timings().queue_time_us()) / 1e3;
      rec_.server_arrival_us = f.timings().arrival_us();
      rec_.server_finished_us = f.timings().finished_us();
      if (f.finish_reason() == v1::FINISH_REASON_ERROR) {
        rec_.status = "FINISH_ERROR";
        rec_.error_message = f.error();
      } else if (f.finish_reason() == v1::FINISH_REASON_CANCELLED) {
        rec_.status = "FINISH_CANCELLED";
        rec_.error_message = "the server cancelled the request";
      }
    }
    StartRead(&msg_);
  }

  void OnDone(const grpc::Status& s) override {
    rec_.end_s = Since(t0_, LoadClock::now());
    rec_.peer = ctx_.peer();
    if (!s.ok()) {
      rec_.status = GrpcCodeName(s.error_code());
      rec_.error_message = s.error_message();
    } else if (!rec_.has_final && rec_.ok()) {
      rec_.status = "NO_FINAL";
      rec_.error_message = "the stream ended OK without a final message";
    }
    done_(this, std::move(rec_));  // *this must not be touched after this line
  }

 private:
  v1::Saturn::Stub* stub_;
  v1::GenerateRequest req_;
  double timeout_s_;
  LoadClock::time_point t0_;
  CallDone done_;
  grpc::ClientContext ctx_;
  v1::GenerateResponse msg_;
  RequestRecord rec_;
};

}  // namespace

std::unique_ptr<StreamCall> GrpcTransport::NewCall(CallRequest request, LoadClock::time_point t0,
                                                   CallDone done) const {
  return std::make_unique<GenerateCall>(conn_.stub(), request, t0, std::move(done));
}

std::string GrpcTransport::target() const {
  std::vector<std::string> names;
  for (const TargetInfo& t : conn_.targets()) names.push_back(t.target);
  return absl::StrJoin(names, ",");
}

}  // namespace saturn::clients
