// OpenAiHttpServer: routes, the stream's event pump and the non-streamed wait. Each request
// runs on one httplib worker thread from parse to the last byte; the engine's event thread only
// queues events for it (server/http/openai_call.h).
#include "server/http/openai_http.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/elastic_task_queue.h"
#include "server/http/http_listener.h"
#include "server/http/metrics_http.h"
#include "server/http/model_chat_template.h"
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
                        " (this server answers POST /v1/completions, GET /v1/models, GET /health, "
                        "GET /metrics and POST /v1/chat/completions)");
  }
  return absl::StrCat("request: HTTP ", status,
                      " before the API read it (malformed headers or framing, or an unsupported "
                      "Content-Encoding)");
}

bool Write(httplib::DataSink& sink, const std::string& bytes) {
  return sink.write(bytes.data(), bytes.size());
}

void AddUsage(const Usage& u, Usage* sum) {
  sum->prompt_tokens += u.prompt_tokens;
  sum->completion_tokens += u.completion_tokens;
  sum->num_preemptions += u.num_preemptions;
}

// What a completion request needs beyond its call, shared by the stream's provider.
struct Completion {
  CompletionHeader header;
  ChoiceFormat format;
  bool include_usage = false;
  // How often a worker checks that its client is still there (ServerConfig::http_client_check):
  // a stream sends an SSE comment after this long without events, a plain response a leading
  // space of its JSON body this often.
  absl::Duration client_check;
};

// Streams pieces as server-sent events, each chunk naming its choice, until every choice has
// ended (the usage of them all when asked for, then [DONE]; true) or one failed (its error
// event, the others cancelled, then [DONE]; true), or a write failed, which cancels them all
// (false).
bool PumpStream(OpenAiCall& call, const Completion& c, httplib::DataSink& sink) {
  std::vector<int64_t> offsets(call.choices(), 0);   // per choice: text sent so far
  std::vector<bool> started(call.choices(), false);  // per choice: a chunk sent
  Usage usage;
  bool failed = false;
  while (!call.done() && !failed) {
    std::optional<OpenAiCall::Piece> p = call.Next(c.client_check);
    if (!p.has_value()) {
      if (Write(sink, ": keep-alive\n\n")) continue;
      call.Cancel();
      return false;
    }
    if (!p->error.ok()) {
      Write(sink, ErrorEvent(p->error));
      call.Cancel();  // one prompt failed: the request fails, and its other prompts end
      failed = true;
    } else if (!p->out.token_ids.empty() || !p->out.text.empty() || p->final) {
      const CompletionChoice choice{p->index, std::move(p->out), p->final ? p->finish_reason : "",
                                    offsets[p->index], !started[p->index]};
      started[p->index] = true;
      if (!Write(sink, CompletionChunkEvent(c.header, c.format, choice, c.include_usage))) {
        call.Cancel();
        return false;
      }
      offsets[p->index] += static_cast<int64_t>(choice.piece.text.size());
    }
    if (p->final) AddUsage(p->usage, &usage);
  }
  if (!failed && c.include_usage) Write(sink, UsageChunkEvent(c.header, usage));
  Write(sink, std::string(kDoneEvent));
  sink.done();
  return true;
}

// A non-streamed completion's choices, gathered in the prompts' order.
struct Gathered {
  explicit Gathered(int n) : choices(n), unfinished(n) {
    for (int i = 0; i < n; ++i) choices[i].index = i;
  }
  std::vector<CompletionChoice> choices;
  Usage usage;         // of the choices that finished
  absl::Status error;  // the first choice that failed
  int unfinished = 0;

  bool done() const { return unfinished == 0 || !error.ok(); }
  void Add(OpenAiCall::Piece p) {
    CompletionPiece& out = choices[p.index].piece;
    out.text += p.out.text;
    out.token_ids.insert(out.token_ids.end(), p.out.token_ids.begin(), p.out.token_ids.end());
    for (PositionLogprobs& lp : p.out.logprobs) out.logprobs.push_back(std::move(lp));
    if (!p.final) return;
    --unfinished;
    if (!p.error.ok() && error.ok()) error = p.error;
    choices[p.index].finish_reason = p.finish_reason;
    AddUsage(p.usage, &usage);
  }
  // Waits for the call's pieces until done or `until`; a choice that failed cancels the others.
  void Gather(OpenAiCall& call, absl::Time until) {
    while (!done() && absl::Now() < until) {
      if (std::optional<OpenAiCall::Piece> p = call.Next(until - absl::Now()); p.has_value()) {
        Add(std::move(*p));
      }
    }
    if (!error.ok()) call.Cancel();
  }
  std::string Json(const Completion& c) const {
    return CompletionJson(c.header, c.format, choices, usage);
  }
};

}  // namespace

OpenAiHttpServer::OpenAiHttpServer(ServingState* state, DiagnosticsState* diag,
                                   std::string model_name)
    : state_(state),
      diag_(diag),
      model_name_(std::move(model_name)),
      created_(absl::ToUnixSeconds(absl::Now())),
      chat_(LoadModelChatTemplate(state->config().engine.model, state->config().chat_template)) {
  if (chat_.ok()) std::cerr << "saturn-server: chat template from " << chat_->origin << "\n";
}

absl::Status OpenAiHttpServer::Start(const std::string& host, int port) {
  // A template asked for by flag must be usable; the model's own may be missing (chat refused).
  if (!state_->config().chat_template.empty() && !chat_.ok()) return chat_.status();
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
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { Chat(req, res); });
  http.Post("/v1/completions",
            [this](const httplib::Request& req, httplib::Response& res) { Complete(req, res); });
  // Where vLLM serves it, for scrapers pointed at the API's port.
  if (diag_ != nullptr) {
    AddMetricsRoute(http, state_, diag_, state_->config().metrics_window_seconds);
  }

  return listener_.Listen(host, port, "--http_port");
}

void OpenAiHttpServer::Complete(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<CompletionRequest> parsed = ParseCompletionRequest(req.body);
  if (!parsed.ok()) return SendError(res, parsed.status());
  Serve(*std::move(parsed), /*chat=*/false, res);
}

void OpenAiHttpServer::Chat(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<ChatRequest> parsed = ParseChatRequest(req.body);
  if (!parsed.ok()) return SendError(res, parsed.status());
  if (!chat_.ok()) return SendError(res, chat_.status());
  const TextTokenizer* tokenizer = state_->text_tokenizer();
  if (tokenizer == nullptr) {
    return SendError(res, absl::InvalidArgumentError(
                              "messages: the rendered conversation needs a text tokenizer, which "
                              "this model lacks (--skip_tokenizer_init?); use /v1/completions "
                              "with token ids"));
  }
  // The template's own errors (raise_exception: roles out of turn, a system message where the
  // model takes none) are the request's: 400 on messages.
  absl::StatusOr<std::string> text = chat_->tmpl.Render(
      parsed->messages, parsed->add_generation_prompt, chat_->bos_token, chat_->eos_token);
  if (!text.ok()) {
    return SendError(
        res, absl::InvalidArgumentError(absl::StrCat("messages: the chat template refused them: ",
                                                     text.status().message())));
  }
  absl::StatusOr<std::vector<int>> ids = tokenizer->EncodeRendered(*text);
  if (!ids.ok()) {
    return SendError(
        res, absl::InvalidArgumentError(absl::StrCat("messages: ", ids.status().message())));
  }
  if (ids->empty())
    return SendError(res, absl::InvalidArgumentError("messages: render to nothing"));
  v1::GenerateRequest& g = parsed->completion.requests.front();
  for (int id : *ids) g.add_prompt_token_ids(id);
  Serve(std::move(parsed->completion), /*chat=*/true, res);
}

void OpenAiHttpServer::Serve(CompletionRequest parsed, bool chat, httplib::Response& res) {
  if (!parsed.model.empty() && parsed.model != model_name_) {
    return SendError(res, absl::NotFoundError(absl::StrCat("model: \"", parsed.model,
                                                           "\" does not exist (this server "
                                                           "serves \"",
                                                           model_name_, "\")")));
  }
  const int n = static_cast<int>(parsed.requests.size());
  absl::StatusOr<std::unique_ptr<OpenAiCall>> admitted = OpenAiCall::Admit(state_, n);
  if (!admitted.ok()) return SendError(res, admitted.status());
  std::shared_ptr<OpenAiCall> call = std::move(*admitted);
  // Every prompt is checked before any is submitted.
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<ConvertedRequest> converted = state_->intake()->Convert(parsed.requests[i]);
    if (!converted.ok()) return SendError(res, InApiTerms(converted.status(), n > 1 ? i : -1));
    requests.push_back(std::move(converted->request));
  }
  const TextTokenizer* tokenizer = state_->text_tokenizer();
  if (!parsed.stop.empty() && tokenizer == nullptr) {
    return SendError(res, absl::InvalidArgumentError(
                              "stop: stop strings need a text tokenizer, which this model "
                              "lacks; use stop_token_ids"));
  }
  if (absl::Status s = call->Submit(std::move(requests), parsed.stop, tokenizer,
                                    diag_ != nullptr ? diag_->request_metrics() : nullptr);
      !s.ok()) {
    return SendError(res, s);
  }
  Completion c;
  c.header = {absl::StrCat(chat ? "chatcmpl-" : "cmpl-", created_, "-", next_id_.fetch_add(1)),
              absl::ToUnixSeconds(absl::Now()), model_name_, chat};
  c.format.with_logprobs = parsed.requests[0].has_logprobs();
  c.format.return_token_ids = parsed.return_token_ids;
  c.format.token_text = [tokenizer](int id) {
    return tokenizer != nullptr ? tokenizer->TokenBytes(id) : std::string();
  };
  c.include_usage = parsed.include_usage;
  c.client_check = state_->config().http_client_check;
  if (parsed.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies (nginx) pass each event at once
    res.set_chunked_content_provider(
        "text/event-stream",
        [call, c](size_t, httplib::DataSink& sink) { return PumpStream(*call, c, sink); });
    return;
  }
  // Not streamed: a request that ends within c.client_check gets its status as usual; a longer
  // one commits to 200 and sends a space of its JSON body now and then, so that a client
  // gone is seen (and its requests cancelled) while it runs.
  auto gathered = std::make_shared<Gathered>(n);
  gathered->Gather(*call, absl::Now() + c.client_check);
  if (gathered->done()) {
    if (!gathered->error.ok()) return SendError(res, gathered->error);
    return res.set_content(gathered->Json(c), "application/json");
  }
  res.set_chunked_content_provider(
      "application/json", [call, c, gathered](size_t, httplib::DataSink& sink) {
        // The probe runs on a clock, not on silence: tokens arriving faster than client_check
        // must not keep a departed client's requests running to max_tokens.
        while (!gathered->done()) {
          gathered->Gather(*call, absl::Now() + c.client_check);
          if (gathered->done()) break;
          if (!Write(sink, " ")) {
            call->Cancel();
            return false;
          }
        }
        Write(sink, gathered->error.ok() ? gathered->Json(c) : ErrorJson(gathered->error));
        sink.done();
        return true;
      });
}

}  // namespace saturn
