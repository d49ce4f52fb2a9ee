// OpenAiTransport (openai_transport.h): connecting (GET /v1/models), the client pool, and one
// completion call per thread.
//
// A call's thread sends the request and reads the stream, sending it once more on a fresh
// connection when a reused one ended before any answer (openai_transport.h); Cancel() sets a
// flag the content receiver checks and shuts the client's socket (cpp-httplib's stop(), the
// one thing it allows from another thread), so a call waiting for its first byte ends at once.
// The thread's last act is the done callback; the runner destroys the call later, which joins
// the thread.
#include "clients/load/openai_transport.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/load/sse.h"
#include "kernels/base/credential_files.h"

namespace saturn::clients {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;

double Since(LoadClock::time_point t0, LoadClock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

std::chrono::microseconds Micros(double s) {
  return std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

bool IsConnectError(httplib::Error e) {
  return e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout ||
         e == httplib::Error::SSLConnection || e == httplib::Error::SSLLoadingCerts ||
         e == httplib::Error::SSLServerVerification;
}

class CompletionCall : public StreamCall {
 public:
  CompletionCall(const OpenAiTransport* transport, size_t target, const CallRequest& r,
                 std::string body, LoadClock::time_point t0, CallDone done)
      : transport_(transport),
        target_(target),
        body_(std::move(body)),
        timeout_s_(r.timeout_s),
        t0_(t0),
        done_(std::move(done)),
        reader_(&rec_) {
    rec_.index = r.index;
    rec_.peer = transport->targets()[target].Url();
  }
  ~CompletionCall() override {
    if (thread_.joinable()) thread_.join();
  }

  void Start() override {
    rec_.send_s = Since(t0_, LoadClock::now());
    thread_ = std::thread([this] { Run(); });
  }

  void Cancel() override {
    cancelled_.store(true);
    std::lock_guard<std::mutex> lock(mu_);
    if (client_ != nullptr) client_->stop();
  }

 private:
  // What one send of the request on one connection came to.
  struct Attempt {
    bool sent = false;  // the exchange ended cleanly
    httplib::Error error = httplib::Error::Success;
    int status = 0;  // the answer's HTTP status; 0: no answer began
    bool timed_out = false;
    std::string error_body;  // a non-2xx answer's body
  };
  void Run();
  Attempt Send(httplib::Client& client, LoadClock::time_point deadline);
  // Whether `a` failed before any answer began, on a connection that the server may have
  // closed, with time left to send again.
  bool NoAnswer(const Attempt& a, LoadClock::time_point deadline) const {
    return !a.sent && a.status == 0 && !a.timed_out && !cancelled_.load() &&
           !IsConnectError(a.error) && LoadClock::now() < deadline;
  }

  const OpenAiTransport* transport_;
  const size_t target_;
  const std::string body_;
  const double timeout_s_;
  const LoadClock::time_point t0_;
  CallDone done_;
  RequestRecord rec_;
  SseParser sse_;                  // the answer's events (one answer: no send after it began)
  CompletionStreamReader reader_;  // into rec_
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  httplib::Client* client_ = nullptr;  // while the request is under way (Cancel stops it)
  std::thread thread_;
};

CompletionCall::Attempt CompletionCall::Send(httplib::Client& client,
                                             LoadClock::time_point deadline) {
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(
      std::max(deadline - LoadClock::now(), LoadClock::duration::zero())));
  {
    std::lock_guard<std::mutex> lock(mu_);
    client_ = &client;
  }
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Accept", "text/event-stream");
  req.set_header("Content-Type", "application/json");
  req.body = body_;
  Attempt a;
  req.response_handler = [&a](const httplib::Response& r) {
    a.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (cancelled_.load()) return false;
    if (LoadClock::now() > deadline) {
      a.timed_out = true;
      return false;
    }
    if (a.status < 200 || a.status >= 300) {
      if (a.error_body.size() < kMaxErrorBody) a.error_body.append(data, n);
      return true;
    }
    const double now = Since(t0_, LoadClock::now());
    for (const SseEvent& e : sse_.Feed(std::string_view(data, n))) {
      reader_.OnData(e.data, now);
      if (reader_.failed()) return false;
    }
    return true;
  };
  httplib::Response res;
  a.sent = !cancelled_.load() && client.send(req, res, a.error);
  if (a.error_body.empty()) a.error_body = res.body;
  std::lock_guard<std::mutex> lock(mu_);
  client_ = nullptr;
  return a;
}

void CompletionCall::Run() {
  const auto deadline = LoadClock::now() + Micros(timeout_s_);
  bool reused = false;
  std::unique_ptr<httplib::Client> client = transport_->Acquire(target_, &reused);
  Attempt a = Send(*client, deadline);
  if (reused && NoAnswer(a, deadline)) {
    // The server closed the kept-alive connection before answering (its keep-alive timeout or
    // request count ran out as the request went): once more on a connection of its own. The
    // request's times still count from its first send.
    client = transport_->NewClient(target_, timeout_s_);
    a = Send(*client, deadline);
  }
  rec_.end_s = Since(t0_, LoadClock::now());
  const std::string& url = rec_.peer;
  if (cancelled_.load()) {
    rec_.status = "CANCELLED";
    rec_.error_message = "cancelled by saturn-load";
  } else if (a.timed_out) {
    rec_.status = "DEADLINE_EXCEEDED";
    rec_.error_message = absl::StrCat("no end within --request_timeout ", timeout_s_, " s");
  } else if (a.status != 0 && (a.status < 200 || a.status >= 300)) {
    rec_.status = HttpStatusName(a.status);
    rec_.error_message = ErrorMessage(a.error_body);
  } else if (!a.sent && !reader_.failed() && !reader_.done()) {
    rec_.status = IsConnectError(a.error) ? "UNAVAILABLE" : "STREAM_BROKEN";
    rec_.error_message = absl::StrCat(url, ": ", httplib::to_string(a.error),
                                      a.status == 0 ? " before an answer" : " before data: [DONE]");
  }
  reader_.Finish(sse_.Pending());
  if (a.sent && rec_.ok()) transport_->Release(target_, std::move(client));
  client.reset();
  done_(this, std::move(rec_));  // *this must not be touched after this line
}

}  // namespace

OpenAiTransport::~OpenAiTransport() = default;

std::unique_ptr<httplib::Client> OpenAiTransport::NewClient(size_t i, double read_timeout_s) const {
  const HttpTarget& t = targets_[i];
  const ChannelSecurityFlags& sec = options_.security;
  // With --tls_server_name the client names that host (SNI and the certificate check) and
  // dials the target's host through cpp-httplib's host -> address map.
  HttpTarget named = t;
  if (t.https && !sec.tls_server_name.empty()) named.host = sec.tls_server_name;
  auto c = sec.tls_cert.empty()
               ? std::make_unique<httplib::Client>(named.Url())
               : std::make_unique<httplib::Client>(named.Url(), sec.tls_cert, sec.tls_key);
  if (named.host != t.host) c->set_hostname_addr_map({{named.host, t.host}});
  if (t.https) {
    if (!sec.tls_ca.empty()) c->set_ca_cert_path(sec.tls_ca);
    c->enable_server_certificate_verification(true);
  }
  if (!token_.empty()) c->set_bearer_token_auth(token_);
  c->set_keep_alive(true);
  // As curl does: without it, Nagle's algorithm holds the request's body (a write after the
  // headers) on a kept-alive connection until the server's delayed ACK, tens of milliseconds.
  c->set_tcp_nodelay(true);
  c->set_connection_timeout(Micros(options_.connect_timeout_s));
  c->set_read_timeout(Micros(read_timeout_s));
  c->set_write_timeout(Micros(options_.connect_timeout_s));
  return c;
}

absl::StatusOr<std::unique_ptr<OpenAiTransport>> OpenAiTransport::Connect(
    const OpenAiOptions& options) {
  std::unique_ptr<OpenAiTransport> t(new OpenAiTransport());
  t->options_ = options;
  if (options.targets.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(options.flag, ": at least one URL is needed"));
  }
  for (const std::string& text : options.targets) {
    absl::StatusOr<HttpTarget> parsed = ParseHttpTarget(options.flag, text);
    if (!parsed.ok()) return parsed.status();
    t->targets_.push_back(*parsed);
  }
  if (!options.security.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadAuthToken(options.security.auth_token_file);
    if (!token.ok()) return token.status();
    t->token_ = *token;
  }
  t->idle_.resize(t->targets_.size());
  const auto deadline = LoadClock::now() + Micros(options.connect_timeout_s);
  for (size_t i = 0; i < t->targets_.size(); ++i) {
    const std::string url = t->targets_[i].Url();
    std::unique_ptr<httplib::Client> c = t->NewClient(i, options.connect_timeout_s);
    std::string why;
    while (true) {
      httplib::Result r = c->Get("/v1/models");
      if (r && r->status == 200) {
        absl::StatusOr<ModelList> models = ParseModelList(r->body);
        if (!models.ok()) {
          return absl::FailedPreconditionError(
              absl::StrCat(options.flag, " ", url, ": ", models.status().message()));
        }
        if (i == 0) {
          t->model_ = options.model_name.empty() ? models->ids[0] : options.model_name;
          for (size_t k = 0; k < models->ids.size(); ++k) {
            if (models->ids[k] != t->model_) continue;
            t->max_model_len_ = models->max_model_len[k];
            t->return_token_ids_ = options.return_token_ids || models->owned_by[k] == "saturn";
          }
        }
        break;
      }
      if (r && (r->status == 401 || r->status == 403)) {
        return absl::UnauthenticatedError(
            absl::StrCat(options.flag, " ", url, ": GET /v1/models answered ", r->status, ": ",
                         ErrorMessage(r->body), " (check --auth_token_file)"));
      }
      // Not up yet (refused, or 503 while the model loads): try again until the deadline.
      const bool retry = r ? r->status == 503 : IsConnectError(r.error());
      why = r ? absl::StrCat("GET /v1/models answered ", r->status, ": ", ErrorMessage(r->body))
              : absl::StrCat("cannot connect: ", httplib::to_string(r.error()));
      if (!retry || LoadClock::now() + std::chrono::milliseconds(200) > deadline) {
        return absl::UnavailableError(absl::StrCat(options.flag, " ", url, ": ", why, " (within ",
                                                   options.connect_timeout_s,
                                                   " s, --connect_timeout)"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  return t;
}

std::unique_ptr<httplib::Client> OpenAiTransport::Acquire(size_t i, bool* reused) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    *reused = !idle_[i].empty();
    if (*reused) {
      std::unique_ptr<httplib::Client> c = std::move(idle_[i].back());
      idle_[i].pop_back();
      return c;
    }
  }
  return NewClient(i, options_.connect_timeout_s);
}

void OpenAiTransport::Release(size_t i, std::unique_ptr<httplib::Client> client) const {
  std::lock_guard<std::mutex> lock(mu_);
  idle_[i].push_back(std::move(client));
}

std::unique_ptr<StreamCall> OpenAiTransport::NewCall(CallRequest request, LoadClock::time_point t0,
                                                     CallDone done) const {
  const size_t target = static_cast<size_t>(next_target_.fetch_add(1) % targets_.size());
  CompletionOptions o;
  o.model = model_;
  o.temperature = request.temperature;
  o.seed = request.seed;
  o.ignore_eos = request.ignore_eos;
  o.return_token_ids = return_token_ids_;
  std::string body = CompletionBody(request.item, o);
  return std::make_unique<CompletionCall>(this, target, request, std::move(body), t0,
                                          std::move(done));
}

std::string OpenAiTransport::target() const {
  std::vector<std::string> urls;
  for (const HttpTarget& t : targets_) urls.push_back(t.Url());
  return absl::StrJoin(urls, ",");
}

}  // namespace saturn::clients
