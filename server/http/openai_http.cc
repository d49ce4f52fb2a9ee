// OpenAiHttpServer: routes, the stream's event pump and the non-streamed wait. Each request
// runs on one httplib worker thread from parse to the last byte; the engine's event thread only
// queues events for it (server/http/openai_call.h).
#include "server/http/openai_http.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/elastic_task_queue.h"
#include "server/http/http_listener.h"
#include "server/http/openai_call.h"
#include "server/http/openai_protocol.h"

namespace saturn {
namespace {

constexpr size_t kMaxBodyBytes = size_t{8} << 20;

void SendError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatus(status);
  res.set_content(ErrorJson(status), "application/json");
}

// The message for an error httplib answered itself (an empty body): the limit or the route.
std::string FramingError(const httplib::Request& req, int status) {
  if (status == 413) {
    return absl::StrCat(
        "request body: larger than ", kMaxBodyBytes >> 20, " MiB, or than ",
        CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH,
        " bytes when sent as application/x-www-form-urlencoded (curl -d's default): send "
        "\"Content-Type: application/json\"");
  }
  if (status == 404) {
    return absl::StrCat("no route for ", req.method, " ", req.path,
                        " (this server answers POST /v1/completions, GET /v1/models, GET /health "
                        "and POST /v1/chat/completions)");
  }
  return absl::StrCat("request: HTTP ", status,
                      " before the API read it (malformed headers or framing, or an unsupported "
                      "Content-Encoding)");
}

bool Write(httplib::DataSink& sink, const std::string& bytes) {
  return sink.write(bytes.data(), bytes.size());
}

// What a completion request needs beyond its call, shared by the stream's provider.
struct Completion {
  CompletionHeader header;
  bool with_logprobs = false;
  bool return_token_ids = false;
  bool include_usage = false;
  std::function<std::string(int)> token_text;
  // How often a worker checks that its client is still there (ServerConfig::http_client_check):
  // a stream sends an SSE comment after this long without events, a plain response a leading
  // space of its JSON body this often.
  absl::Duration client_check;
};

// Streams pieces as server-sent events until the final one (true) or a failed write, which
// cancels the request (false).
bool PumpStream(OpenAiCall& call, const Completion& c, httplib::DataSink& sink) {
  int64_t offset = 0;
  for (;;) {
    std::optional<OpenAiCall::Piece> p = call.Next(c.client_check);
    if (!p.has_value()) {
      if (Write(sink, ": keep-alive\n\n")) continue;
      call.Cancel();
      return false;
    }
    if (!p->error.ok()) {
      Write(sink, ErrorEvent(p->error));
    } else if (!p->out.token_ids.empty() || !p->out.text.empty() || p->final) {
      if (!Write(sink, CompletionChunkEvent(c.header, p->out, c.token_text, c.with_logprobs,
                                            c.return_token_ids, p->final ? p->finish_reason : "",
                                            c.include_usage, offset))) {
        call.Cancel();
        return false;
      }
      offset += static_cast<int64_t>(p->out.text.size());
      if (p->final && c.include_usage) Write(sink, UsageChunkEvent(c.header, p->usage));
    }
    if (!p->final) continue;
    Write(sink, std::string(kDoneEvent));
    sink.done();
    return true;
  }
}

// A non-streamed completion's pieces, gathered.
struct Gathered {
  CompletionPiece out;
  OpenAiCall::Piece last;
  bool done = false;

  void Add(OpenAiCall::Piece p) {
    out.text += p.out.text;
    out.token_ids.insert(out.token_ids.end(), p.out.token_ids.begin(), p.out.token_ids.end());
    for (PositionLogprobs& lp : p.out.logprobs) out.logprobs.push_back(std::move(lp));
    done = p.final;
    if (done) last = std::move(p);
  }
  std::string Json(const Completion& c) const {
    return CompletionJson(c.header, out, c.token_text, c.with_logprobs, c.return_token_ids,
                          last.finish_reason, &last.usage, 0);
  }
};

}  // namespace

OpenAiHttpServer::OpenAiHttpServer(ServingState* state, DiagnosticsState* diag,
                                   std::string model_name)
    : state_(state),
      diag_(diag),
      model_name_(std::move(model_name)),
      created_(absl::ToUnixSeconds(absl::Now())) {}

absl::Status OpenAiHttpServer::Start(const std::string& host, int port) {
  if (absl::Status s = listener_.Init(
          state_->config(), "the HTTP API",
          [](httplib::Response& res) {
            SendError(res, absl::UnauthenticatedError("send \"Authorization: Bearer "
                                                      "<token>\" with the server's token"));
          });
      !s.ok()) {
    return s;
  }
  httplib::Server& http = listener_.server();
  // A request holds its worker from parse to last byte: room for every sequence the engine may
  // run at once, plus some waiting and idle keep-alive connections (more wait in the queue,
  // not refused). Workers start as connections need them and end after 30 s idle.
  const int workers = std::clamp(state_->config().engine.max_num_seqs_limit + 64, 16, 1024);
  http.new_task_queue = [workers] {
    return new ElasticTaskQueue(workers, /*keep_threads=*/2, absl::Seconds(30));
  };
  http.set_payload_max_length(kMaxBodyBytes);
  http.set_keep_alive_max_count(1000);
  // Each event is one small write: without TCP_NODELAY, Nagle holds it until the client's
  // delayed ACK (about 40 ms) on a kept-alive connection, and a stream arrives in one burst.
  http.set_tcp_nodelay(true);
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                                 httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    res.set_content(HttpErrorJson(res.status, FramingError(req, res.status)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        SendError(res, absl::InternalError("the server failed on this request"));
      });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (state_->draining()) return SendError(res, absl::UnavailableError("server shutting down"));
    if (state_->engine() == nullptr)
      return SendError(res, absl::UnavailableError("model is loading"));
    res.status = 200;
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    absl::StatusOr<std::unique_ptr<OpenAiCall>> call = OpenAiCall::Admit(state_);
    if (!call.ok()) return SendError(res, call.status());
    res.set_content(ModelsJson(model_name_, created_, state_->intake()->limits().max_model_len),
                    "application/json");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request&, httplib::Response& res) {
    SendError(res, ChatTemplateRefusal(state_->config().engine.model));
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<CompletionRequest> parsed = ParseCompletionRequest(req.body);
    if (!parsed.ok()) return SendError(res, parsed.status());
    if (!parsed->model.empty() && parsed->model != model_name_) {
      return SendError(res, absl::NotFoundError(absl::StrCat("model: \"", parsed->model,
                                                             "\" does not exist (this server "
                                                             "serves \"",
                                                             model_name_, "\")")));
    }
    absl::StatusOr<std::unique_ptr<OpenAiCall>> admitted = OpenAiCall::Admit(state_);
    if (!admitted.ok()) return SendError(res, admitted.status());
    std::shared_ptr<OpenAiCall> call = std::move(*admitted);
    absl::StatusOr<ConvertedRequest> converted = state_->intake()->Convert(parsed->generate);
    if (!converted.ok()) return SendError(res, InApiTerms(converted.status()));
    const TextTokenizer* tokenizer = state_->text_tokenizer();
    if (!parsed->stop.empty() && tokenizer == nullptr) {
      return SendError(res, absl::InvalidArgumentError(
                                "stop: stop strings need a text tokenizer, which this model "
                                "lacks; use stop_token_ids"));
    }
    if (absl::Status s = call->Submit(std::move(converted->request), parsed->stop, tokenizer,
                                      diag_ != nullptr ? diag_->request_metrics() : nullptr);
        !s.ok()) {
      return SendError(res, InApiTerms(s));
    }
    Completion c;
    c.header = {absl::StrCat("cmpl-", created_, "-", next_id_.fetch_add(1)),
                absl::ToUnixSeconds(absl::Now()), model_name_};
    c.with_logprobs = parsed->generate.has_logprobs();
    c.return_token_ids = parsed->return_token_ids;
    c.include_usage = parsed->include_usage;
    c.client_check = state_->config().http_client_check;
    c.token_text = [tokenizer](int id) {
      return tokenizer != nullptr ? tokenizer->TokenBytes(id) : std::string();
    };
    if (parsed->stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");  // proxies (nginx) pass each event at once
      res.set_chunked_content_provider(
          "text/event-stream",
          [call, c](size_t, httplib::DataSink& sink) { return PumpStream(*call, c, sink); });
      return;
    }
    // Not streamed: a request that ends within c.client_check gets its status as usual; a longer
    // one commits to 200 and sends a space of its JSON body now and then, so that a client
    // gone is seen (and its request cancelled) while it runs.
    auto gathered = std::make_shared<Gathered>();
    for (const absl::Time until = absl::Now() + c.client_check;
         !gathered->done && absl::Now() < until;) {
      if (std::optional<OpenAiCall::Piece> p = call->Next(until - absl::Now()); p.has_value()) {
        gathered->Add(std::move(*p));
      }
    }
    if (gathered->done) {
      if (!gathered->last.error.ok()) return SendError(res, gathered->last.error);
      return res.set_content(gathered->Json(c), "application/json");
    }
    res.set_chunked_content_provider("application/json", [call, c, gathered](
                                                             size_t, httplib::DataSink& sink) {
      // The probe runs on a clock, not on silence: tokens arriving faster than client_check
      // must not keep a departed client's request running to max_tokens.
      absl::Time probe_at = absl::Now() + c.client_check;
      while (!gathered->done) {
        std::optional<OpenAiCall::Piece> p =
            call->Next(std::max(absl::ZeroDuration(), probe_at - absl::Now()));
        if (p.has_value()) gathered->Add(std::move(*p));
        if (gathered->done || absl::Now() < probe_at) continue;
        if (!Write(sink, " ")) {
          call->Cancel();
          return false;
        }
        probe_at = absl::Now() + c.client_check;
      }
      Write(sink, gathered->last.error.ok() ? gathered->Json(c) : ErrorJson(gathered->last.error));
      sink.done();
      return true;
    });
  });

  return listener_.Listen(host, port, "--http_port");
}

}  // namespace saturn
