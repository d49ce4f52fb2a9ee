// The OpenAI-compatible completions API as saturn-load speaks it to vLLM, llama.cpp's server,
// TGI or Saturn's own HTTP front (--http_port): the --target URL, the request body of
// POST /v1/completions, GET /v1/models, error answers, and the reading of a stream's events
// into a RequestRecord (clients/common/stats.h). Pure: no I/O, no clock.
//
// A stream is server-sent events (sse.h) of completion chunks,
//   data: {"choices":[{"text":"..","token_ids":[..],"finish_reason":null}], "usage":null}
//   data: {"choices":[], "usage":{"prompt_tokens":8,"completion_tokens":4}}
//   data: [DONE]
// A content chunk has non-empty text or token ids (vLLM's return_token_ids); its arrival is a
// token time (TTFT: the first, ITL: the gaps). The output token count is the last usage's
// completion_tokens (stream_options.include_usage), else the tokens the chunks carried (one
// per chunk without token ids). {"error": {...}} in the stream, or an end before [DONE], fails
// the request.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/common/stats.h"
#include "clients/load/workload.h"

namespace saturn::clients {

// "http://host:port" or "https://host:port"; a trailing "/" or "/v1" (an SDK's base_url) is
// accepted and dropped; without a port, 80 or 443.
struct HttpTarget {
  bool https = false;
  std::string host;  // without the brackets of an IPv6 literal
  int port = 0;
  std::string Url() const;  // scheme://host:port
};
// Errors (INVALID_ARGUMENT) name `flag`.
absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& flag, const std::string& text);
// Whether `text` is written as a URL (http:// or https://).
bool LooksLikeUrl(const std::string& text);

struct CompletionOptions {
  std::string model;
  float temperature = 0;
  int64_t seed = 0;
  bool ignore_eos = false;        // vLLM's extension; sent only when true
  bool return_token_ids = false;  // vLLM's extension; sent only when true
};
// The JSON body: the prompt as text or as a list of token ids, max_tokens, temperature, seed,
// stream with stream_options.include_usage, and the extensions asked for.
std::string CompletionBody(const WorkItem& item, const CompletionOptions& options);

// What GET /v1/models says.
struct ModelList {
  std::vector<std::string> ids;
  std::vector<int> max_model_len;     // per id; 0 when the server does not say (vLLM and Saturn do)
  std::vector<std::string> owned_by;  // per id ("saturn" from Saturn's HTTP front)
};
absl::StatusOr<ModelList> ParseModelList(const std::string& body);

// RequestRecord::status for an HTTP answer: "HTTP_<code>".
std::string HttpStatusName(int status);
// The message of an error answer: OpenAI's {"error": {"message": ...}} (also {"error": "..."},
// {"message": ...} and FastAPI's {"detail": ...}), else the body's start.
std::string ErrorMessage(const std::string& body);

// Reads one stream's events into its record (token times and counts, usage, the end).
class CompletionStreamReader {
 public:
  // `record` must outlive the reader.
  explicit CompletionStreamReader(RequestRecord* record) : rec_(record) {}
  // One event's data, arrived at `now_s`. Returns false once the stream is over ([DONE]) or
  // failed; the rest of the stream is then not read.
  bool OnData(const std::string& data, double now_s);
  // At the stream's end (`cut_off`: the transport lost bytes of an unfinished event): sets the
  // output token count, and fails a stream that never reached [DONE].
  void Finish(bool cut_off);
  bool done() const { return done_; }
  bool failed() const { return failed_; }

 private:
  void Fail(const std::string& status, const std::string& message);

  RequestRecord* rec_;
  bool done_ = false;
  bool failed_ = false;
  int chunk_tokens_ = 0;       // tokens the content chunks carried
  int usage_completion_ = -1;  // usage.completion_tokens (-1: none seen)
};

}  // namespace saturn::clients
