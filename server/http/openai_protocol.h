// The OpenAI-compatible API's wire format (POST /v1/completions, GET /v1/models, errors), as
// vLLM and llama.cpp's server speak it: request JSON -> the same saturn.v1.GenerateRequest the
// gRPC front builds (then checked once by ToEngineRequest and Engine::Submit), and the
// response, chunk, usage and error JSON. Pure functions, no I/O; thread-safe.
//
// Accepted (OpenAI): model, prompt (a string, token ids, or a list of up to kMaxPrompts of
// either, each answered as its own choice with its index, as OpenAI and vLLM do), max_tokens,
// temperature (default 1, as OpenAI and vLLM), top_p, seed, stop (a string or up to
// kMaxStopStrings), logprobs (0-20), stream, stream_options.include_usage, n = 1, best_of = 1,
// echo = false, user. vLLM's extensions: top_k (-1 or 0: off), ignore_eos, stop_token_ids,
// return_token_ids. Fields Saturn cannot honour (echo, n > 1, suffix, penalties, logit_bias,
// min_tokens) are refused by name; unknown fields are ignored, as vLLM does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/request.h"
#include "engine/tokenizer/chat_template.h"
#include "saturn/v1/saturn.pb.h"

namespace saturn {

// Prompts in one request (each is its own engine request).
inline constexpr int kMaxPrompts = 64;
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopStringBytes = 256;
// Arrays and objects nested deeper than this refuse the body before it is parsed (a request
// needs 3: the body, prompt, a token-id list in prompt).
inline constexpr int kMaxJsonDepth = 32;

struct CompletionRequest {
  // One per prompt, in the prompt list's order (choice i answers requests[i]), each with the
  // same sampling fields; ToEngineRequest checks them.
  std::vector<v1::GenerateRequest> requests;
  std::string model;  // "" when the request named none
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool return_token_ids = false;  // choices carry token_ids (vLLM's extension)
  std::vector<std::string> stop;  // stop strings
};

// Parses a /v1/completions body. INVALID_ARGUMENT names the field and the limit.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body);

inline constexpr int kMaxMessages = 4096;

// A /v1/chat/completions body: the messages the model's chat template renders into the prompt,
// and one request with every other field (its prompt unset until rendered).
struct ChatRequest {
  CompletionRequest completion;  // requests: exactly one
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;  // vLLM's extension; the template's variable
};

// Accepted as for completions, but: messages (a string content, or a list of text parts) in place
// of prompt; max_completion_tokens (or max_tokens); logprobs true/false with top_logprobs
// (0-20); add_generation_prompt. Refused by name: tools, functions, tool_choice,
// response_format, tool_calls in a message, and other content parts (images, audio).
absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body);

// What ToEngineRequest and the engine call the prompt, renamed to the API's field: "prompt",
// or "prompt[i]" for prompt `prompt_index` of a request of several (-1: the only one), whose
// other errors end with " (prompt[i])".
absl::Status InApiTerms(const absl::Status& status, int prompt_index = -1);

// The HTTP status for an error (400 bad field, 401, 404, 429 overload, 503 loading or
// draining, 500 otherwise).
int HttpStatus(const absl::Status& status);
// {"error": {"message", "type", "param", "code"}}, OpenAI's error shape.
std::string ErrorJson(const absl::Status& status);
// The same shape for an HTTP status the HTTP layer set before the API saw the request (413
// too large, 404 no route, 400 unreadable framing): code is `http`, param null.
std::string HttpErrorJson(int http, std::string_view message);

// One choice's worth of output: text, the tokens behind it and their logprobs.
struct CompletionPiece {
  std::string text;
  std::vector<int> token_ids;
  std::vector<PositionLogprobs> logprobs;
};

// A choice of a response: the prompt it answers (`index`), its output, why it finished (""
// -> null) and the length of its text returned before `piece` (logprobs.text_offset).
struct CompletionChoice {
  int index = 0;
  CompletionPiece piece;
  std::string finish_reason;
  int64_t text_offset = 0;
  bool first = false;  // a stream's first chunk of this choice (a chat delta then has the role)
};

// How a request's choices are written: what it asked for.
struct ChoiceFormat {
  std::function<std::string(int)> token_text;  // a token's text, for logprobs
  bool with_logprobs = false;
  bool return_token_ids = false;  // vLLM's extension
};

struct CompletionHeader {
  std::string id;  // "cmpl-..." ("chatcmpl-..." for a chat completion)
  int64_t created = 0;
  std::string model;
  // A chat completion: objects "chat.completion" and "chat.completion.chunk", each choice a
  // message (or a chunk's delta) of role "assistant", logprobs as {"content": [...]}.
  bool chat = false;
};

// A whole (non-streamed) response: the choices in the order given, the usage of them all.
std::string CompletionJson(const CompletionHeader& h, const ChoiceFormat& format,
                           const std::vector<CompletionChoice>& choices, const Usage& usage);
// One server-sent event ("data: ...\n\n") of a stream: a chunk of one choice, its usage (null
// until the usage chunk when include_usage), the usage-only chunk (choices []), and the end.
std::string CompletionChunkEvent(const CompletionHeader& h, const ChoiceFormat& format,
                                 const CompletionChoice& choice, bool include_usage);
std::string UsageChunkEvent(const CompletionHeader& h, const Usage& usage);
std::string ErrorEvent(const absl::Status& status);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// GET /v1/models: the one model this server serves.
std::string ModelsJson(const std::string& model, int64_t created, int max_model_len);

// "length" or "stop" (the API's finish_reason).
std::string ApiFinishReason(FinishReason reason);

}  // namespace saturn
