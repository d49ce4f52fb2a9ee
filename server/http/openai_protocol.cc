// OpenAI wire format <-> saturn.v1.GenerateRequest and the response JSON (nlohmann-json).
#include "server/http/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/base/json_depth.h"

namespace saturn {
namespace {

using Json = nlohmann::json;

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The field when present and not null.
const Json* Field(const Json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

absl::Status GetInt(const Json& body, const char* name, std::optional<int64_t>* out) {
  const Json* f = Field(body, name);
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_number_integer()) return Bad(name, "must be an integer");
  if (f->is_number_unsigned() && f->get<uint64_t>() > uint64_t{INT64_MAX}) {
    return Bad(name, absl::StrCat("must fit in a signed 64-bit integer, got ", f->get<uint64_t>()));
  }
  *out = f->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetNumber(const Json& body, const char* name, std::optional<double>* out) {
  const Json* f = Field(body, name);
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_number()) return Bad(name, "must be a number");
  *out = f->get<double>();
  return absl::OkStatus();
}

// A number the engine takes as f32: one past f32's range is refused, not turned into inf.
absl::Status GetFloat(const Json& body, const char* name, std::optional<double>* out) {
  if (absl::Status s = GetNumber(body, name, out); !s.ok()) return s;
  if (out->has_value() && std::abs(**out) > std::numeric_limits<float>::max()) {
    return Bad(name, absl::StrFormat("must be within f32's range (|x| <= %g), got %g",
                                     std::numeric_limits<float>::max(), **out));
  }
  return absl::OkStatus();
}

absl::Status GetBool(const Json& body, const char* name, bool* out) {
  const Json* f = Field(body, name);
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_boolean()) return Bad(name, "must be true or false");
  *out = f->get<bool>();
  return absl::OkStatus();
}

// An int32 field in [lo, hi].
absl::Status GetBoundedInt(const Json& body, const char* name, int64_t lo, int64_t hi,
                           std::optional<int64_t>* out) {
  if (absl::Status s = GetInt(body, name, out); !s.ok()) return s;
  if (out->has_value() && (**out < lo || **out > hi)) {
    return Bad(name, absl::StrFormat("must be in [%d, %d], got %d", lo, hi, **out));
  }
  return absl::OkStatus();
}

// One prompt, text or token ids, named `field` in errors.
absl::Status OnePrompt(const Json& p, const std::string& field, v1::GenerateRequest* out) {
  if (!p.is_string() && !p.is_array()) {
    return Bad(field, "must be a string or a list of token ids");
  }
  if (p.is_string() ? p.get_ref<const std::string&>().empty() : p.empty()) {
    return Bad(field, "an empty prompt is not allowed");
  }
  if (p.is_string()) {
    out->set_prompt_text(p.get<std::string>());
    return absl::OkStatus();
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (!p[i].is_number_integer() || p[i].get<int64_t>() < 0 || p[i].get<int64_t>() > INT32_MAX) {
      return Bad(absl::StrCat(field, "[", i, "]"), "token ids must be integers >= 0");
    }
    out->add_prompt_token_ids(static_cast<int32_t>(p[i].get<int64_t>()));
  }
  return absl::OkStatus();
}

// prompt: "text" or [ids] (one prompt), or a list of up to kMaxPrompts prompts, ["text", ...]
// or [[ids], ...]: one request per prompt, holding only its prompt.
absl::Status Prompts(const Json& body, std::vector<v1::GenerateRequest>* out) {
  const Json* p = Field(body, "prompt");
  if (p == nullptr) {
    return Bad("prompt", "required (a string, a list of token ids, or a list of either)");
  }
  if (!p->is_array() || p->empty() || (*p)[0].is_number()) {
    return OnePrompt(*p, "prompt", &out->emplace_back());
  }
  if (p->size() > static_cast<size_t>(kMaxPrompts)) {
    return Bad("prompt", absl::StrFormat("at most %d prompts, got %d", kMaxPrompts, p->size()));
  }
  for (size_t i = 0; i < p->size(); ++i) {
    if (absl::Status s = OnePrompt((*p)[i], absl::StrCat("prompt[", i, "]"), &out->emplace_back());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Stop(const Json& body, std::vector<std::string>* out) {
  const Json* s = Field(body, "stop");
  if (s == nullptr) return absl::OkStatus();
  if (s->is_string()) {
    out->push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (static_cast<int>(s->size()) > kMaxStopStrings) {
      return Bad("stop", absl::StrFormat("at most %d strings, got %d", kMaxStopStrings, s->size()));
    }
    for (const Json& x : *s) {
      if (!x.is_string()) return Bad("stop", "must be a string or a list of strings");
      out->push_back(x.get<std::string>());
    }
  } else {
    return Bad("stop", "must be a string or a list of strings");
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const std::string& x = (*out)[i];
    if (x.empty() || static_cast<int>(x.size()) > kMaxStopStringBytes) {
      return Bad(absl::StrCat("stop[", i, "]"),
                 absl::StrFormat("must hold 1 to %d bytes, got %d", kMaxStopStringBytes, x.size()));
    }
  }
  return absl::OkStatus();
}

// messages: [{role, content}], content a string or a list of {"type": "text", "text"} parts
// (joined with newlines, as vLLM joins them for a template that takes a string).
absl::Status Messages(const Json& body, std::vector<ChatMessage>* out) {
  const Json* m = Field(body, "messages");
  if (m == nullptr || !m->is_array() || m->empty()) {
    return Bad("messages", "required: a non-empty list of {\"role\", \"content\"} objects");
  }
  if (m->size() > static_cast<size_t>(kMaxMessages)) {
    return Bad("messages", absl::StrFormat("at most %d messages, got %d", kMaxMessages, m->size()));
  }
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string at = absl::StrCat("messages[", i, "]");
    const Json& one = (*m)[i];
    if (!one.is_object()) return Bad(at, "must be an object with role and content");
    const Json* role = Field(one, "role");
    if (role == nullptr || !role->is_string() || role->get_ref<const std::string&>().empty() ||
        role->get_ref<const std::string&>().size() > 64) {
      return Bad(absl::StrCat(at, ".role"), "required: a string of 1 to 64 bytes");
    }
    if (Field(one, "tool_calls") != nullptr) {
      return Bad(absl::StrCat(at, ".tool_calls"), "not supported (messages of text only)");
    }
    ChatMessage msg{role->get<std::string>(), ""};
    const Json* content = Field(one, "content");
    if (content == nullptr) {
      return Bad(absl::StrCat(at, ".content"), "required: a string or a list of text parts");
    }
    if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const Json& part = (*content)[k];
        const Json* type = part.is_object() ? Field(part, "type") : nullptr;
        const Json* text = part.is_object() ? Field(part, "text") : nullptr;
        if (type == nullptr || !type->is_string() || *type != "text" || text == nullptr ||
            !text->is_string()) {
          return Bad(absl::StrCat(at, ".content[", k, "]"),
                     "only {\"type\": \"text\", \"text\": \"...\"} parts are supported");
        }
        if (k > 0) msg.content += "\n";
        msg.content += text->get<std::string>();
      }
    } else {
      return Bad(absl::StrCat(at, ".content"), "must be a string or a list of text parts");
    }
    out->push_back(std::move(msg));
  }
  return absl::OkStatus();
}

// Fields Saturn cannot honour: refused by name unless they ask for the default.
absl::Status Unsupported(const Json& body) {
  bool echo = false;
  if (absl::Status s = GetBool(body, "echo", &echo); !s.ok()) return s;
  if (echo) return Bad("echo", "not supported (Saturn returns the completion only)");
  for (const char* one : {"n", "best_of"}) {
    std::optional<int64_t> v;
    if (absl::Status s = GetInt(body, one, &v); !s.ok()) return s;
    if (v.has_value() && *v != 1) {
      return Bad(one, absl::StrFormat("only 1 is supported, got %d", *v));
    }
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    std::optional<double> v;
    if (absl::Status s = GetNumber(body, penalty, &v); !s.ok()) return s;
    if (v.has_value() && *v != 0) return Bad(penalty, "not supported (only 0)");
  }
  std::optional<double> rep;
  if (absl::Status s = GetNumber(body, "repetition_penalty", &rep); !s.ok()) return s;
  if (rep.has_value() && *rep != 1) return Bad("repetition_penalty", "not supported (only 1)");
  std::optional<int64_t> min_tokens;
  if (absl::Status s = GetInt(body, "min_tokens", &min_tokens); !s.ok()) return s;
  if (min_tokens.value_or(0) != 0) return Bad("min_tokens", "not supported (only 0)");
  if (const Json* f = Field(body, "suffix"); f != nullptr) return Bad("suffix", "not supported");
  if (const Json* f = Field(body, "logit_bias"); f != nullptr && !f->empty()) {
    return Bad("logit_bias", "not supported");
  }
  return absl::OkStatus();
}

Json Logprobs(const CompletionPiece& piece, const std::function<std::string(int)>& token_text,
              int64_t text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  for (size_t i = 0; i < piece.logprobs.size(); ++i) {
    const PositionLogprobs& lp = piece.logprobs[i];
    tokens.push_back(token_text(lp.token.token_id));
    token_logprobs.push_back(lp.token.logprob);
    Json alternatives = Json::object();
    for (const TokenLogprob& t : lp.top) {
      const std::string text = token_text(t.token_id);
      if (!alternatives.contains(text)) alternatives[text] = t.logprob;  // most likely first
    }
    top.push_back(std::move(alternatives));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(token_text(lp.token.token_id).size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

Json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// A chat choice's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
Json ChatLogprobs(const CompletionPiece& piece, const std::function<std::string(int)>& token_text) {
  auto entry = [&](int id, double logprob) {
    const std::string text = token_text(id);
    std::vector<int> bytes;  // unsigned, as OpenAI sends them
    for (unsigned char ch : text) bytes.push_back(ch);
    return Json{{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
  };
  Json content = Json::array();
  for (const PositionLogprobs& lp : piece.logprobs) {
    Json e = entry(lp.token.token_id, lp.token.logprob);
    e["top_logprobs"] = Json::array();
    for (const TokenLogprob& t : lp.top) e["top_logprobs"].push_back(entry(t.token_id, t.logprob));
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

// A choice: text_completion's, or a chat completion's message (whole) or delta (a chunk; the
// first of a choice also says its role, as OpenAI's stream does).
Json Choice(const CompletionHeader& h, const ChoiceFormat& f, const CompletionChoice& choice,
            bool chunk) {
  const CompletionPiece& piece = choice.piece;
  Json c = {{"index", choice.index}};
  Json logprobs;
  if (f.with_logprobs) {
    logprobs = h.chat ? ChatLogprobs(piece, f.token_text)
                      : Logprobs(piece, f.token_text, choice.text_offset);
  }
  if (!h.chat) {
    c["text"] = piece.text;
  } else if (!chunk) {
    c["message"] = {{"role", "assistant"}, {"content", piece.text}};
  } else {
    Json delta = Json::object();
    if (choice.first) delta["role"] = "assistant";
    if (choice.first || !piece.text.empty()) delta["content"] = piece.text;
    c["delta"] = std::move(delta);
  }
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = choice.finish_reason.empty() ? Json() : Json(choice.finish_reason);
  if (f.return_token_ids) c["token_ids"] = piece.token_ids;
  return c;
}

Json Envelope(const CompletionHeader& h, bool chunk) {
  const char* object = !h.chat ? "text_completion"
                       : chunk ? "chat.completion.chunk"
                               : "chat.completion";
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

// Text that came from byte tokens may not be valid UTF-8 (token strings in logprobs): the
// invalid bytes become U+FFFD rather than failing the response.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Event(const Json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

// What completions and chat completions share: model, sampling (temperature, top_p, top_k,
// seed), ignore_eos, stop_token_ids, stop, stream and stream_options, return_token_ids, user.
absl::Status SharedFields(const Json& body, v1::GenerateRequest* out, CompletionRequest* req) {
  v1::GenerateRequest& g = *out;
  CompletionRequest& r = *req;
  if (const Json* m = Field(body, "model"); m != nullptr) {
    if (!m->is_string()) return Bad("model", "must be a string");
    r.model = m->get<std::string>();
  }
  std::optional<int64_t> top_k, seed;
  std::optional<double> temperature, top_p;
  if (absl::Status s = GetBoundedInt(body, "top_k", -1, INT32_MAX, &top_k); !s.ok()) return s;
  if (absl::Status s = GetInt(body, "seed", &seed); !s.ok()) return s;
  if (absl::Status s = GetFloat(body, "temperature", &temperature); !s.ok()) return s;
  if (absl::Status s = GetFloat(body, "top_p", &top_p); !s.ok()) return s;
  g.set_temperature(static_cast<float>(temperature.value_or(1.0)));  // OpenAI's default
  if (top_p.has_value()) g.set_top_p(static_cast<float>(*top_p));
  if (top_k.has_value()) g.set_top_k(static_cast<int32_t>(*top_k < 0 ? 0 : *top_k));
  if (seed.has_value()) g.set_seed(*seed);
  bool ignore_eos = false;
  if (absl::Status s = GetBool(body, "ignore_eos", &ignore_eos); !s.ok()) return s;
  g.set_ignore_eos(ignore_eos);
  if (const Json* ids = Field(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return Bad("stop_token_ids", "must be a list of token ids");
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return Bad("stop_token_ids", "must be a list of token ids (integers >= 0)");
      }
      g.add_stop_token_ids(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (absl::Status s = Stop(body, &r.stop); !s.ok()) return s;
  if (absl::Status s = GetBool(body, "stream", &r.stream); !s.ok()) return s;
  if (absl::Status s = GetBool(body, "return_token_ids", &r.return_token_ids); !s.ok()) return s;
  if (const Json* o = Field(body, "stream_options"); o != nullptr) {
    if (!r.stream) return Bad("stream_options", "allowed only with \"stream\": true");
    if (!o->is_object()) return Bad("stream_options", "must be an object");
    if (absl::Status s = GetBool(*o, "include_usage", &r.include_usage); !s.ok()) {
      return Bad("stream_options.include_usage", "must be true or false");
    }
  }
  if (const Json* u = Field(body, "user"); u != nullptr && !u->is_string()) {
    return Bad("user", "must be a string");
  }
  return absl::OkStatus();
}

// The body as a JSON object (its nesting checked before the parse: nlohmann recurses per level).
absl::StatusOr<Json> BodyObject(std::string_view text) {
  if (absl::Status s = CheckJsonDepth(text, kMaxJsonDepth, "request body"); !s.ok()) return s;
  Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Bad("request body", "not valid JSON");
  if (!body.is_object()) return Bad("request body", "must be a JSON object");
  return body;
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body_text) {
  absl::StatusOr<Json> parsed = BodyObject(body_text);
  if (!parsed.ok()) return parsed.status();
  const Json& body = *parsed;
  CompletionRequest r;
  if (absl::Status s = Unsupported(body); !s.ok()) return s;
  if (absl::Status s = Prompts(body, &r.requests); !s.ok()) return s;
  v1::GenerateRequest g;  // the fields every prompt's request shares
  std::optional<int64_t> max_tokens, logprobs;
  if (absl::Status s = GetBoundedInt(body, "max_tokens", 1, INT32_MAX, &max_tokens); !s.ok()) {
    return s;
  }
  if (absl::Status s = GetBoundedInt(body, "logprobs", 0, kMaxLogprobs, &logprobs); !s.ok()) {
    return s;
  }
  if (max_tokens.has_value()) g.set_max_tokens(static_cast<int32_t>(*max_tokens));
  if (logprobs.has_value()) g.set_logprobs(static_cast<int32_t>(*logprobs));
  if (absl::Status s = SharedFields(body, &g, &r); !s.ok()) return s;
  // Each request holds only its prompt, `g` none: merged, each has both.
  for (v1::GenerateRequest& one : r.requests) one.MergeFrom(g);
  return r;
}

absl::StatusOr<ChatRequest> ParseChatRequest(std::string_view body_text) {
  absl::StatusOr<Json> parsed = BodyObject(body_text);
  if (!parsed.ok()) return parsed.status();
  const Json& body = *parsed;
  ChatRequest c;
  CompletionRequest& r = c.completion;
  if (absl::Status s = Unsupported(body); !s.ok()) return s;
  // Tools and structured output change what the template renders and how the output is read.
  for (const char* one : {"tools", "functions", "response_format", "tool_choice"}) {
    if (const Json* f = Field(body, one); f != nullptr && !(f->is_array() && f->empty())) {
      return Bad(one, "not supported (Saturn renders messages of text only)");
    }
  }
  if (absl::Status s = Messages(body, &c.messages); !s.ok()) return s;
  if (absl::Status s = GetBool(body, "add_generation_prompt", &c.add_generation_prompt); !s.ok()) {
    return s;
  }
  v1::GenerateRequest g;
  // max_completion_tokens is OpenAI's current name, max_tokens the older one vLLM still takes.
  std::optional<int64_t> max_tokens, newer, top_logprobs;
  if (absl::Status s = GetBoundedInt(body, "max_tokens", 1, INT32_MAX, &max_tokens); !s.ok()) {
    return s;
  }
  if (absl::Status s = GetBoundedInt(body, "max_completion_tokens", 1, INT32_MAX, &newer);
      !s.ok()) {
    return s;
  }
  if (newer.has_value()) max_tokens = newer;
  if (max_tokens.has_value()) g.set_max_tokens(static_cast<int32_t>(*max_tokens));
  bool logprobs = false;
  if (absl::Status s = GetBool(body, "logprobs", &logprobs); !s.ok()) return s;
  if (absl::Status s = GetBoundedInt(body, "top_logprobs", 0, kMaxLogprobs, &top_logprobs);
      !s.ok()) {
    return s;
  }
  if (top_logprobs.has_value() && !logprobs) {
    return Bad("top_logprobs", "allowed only with \"logprobs\": true");
  }
  if (logprobs) g.set_logprobs(static_cast<int32_t>(top_logprobs.value_or(0)));
  if (absl::Status s = SharedFields(body, &g, &r); !s.ok()) return s;
  r.requests.push_back(std::move(g));  // its prompt: the rendered messages (openai_http.cc)
  return c;
}

absl::Status InApiTerms(const absl::Status& status, int prompt_index) {
  const std::string prompt =
      prompt_index < 0 ? "prompt" : absl::StrCat("prompt[", prompt_index, "]");
  for (absl::string_view field : {"prompt_text", "prompt_token_ids"}) {
    if (absl::StartsWith(status.message(), field)) {
      return absl::Status(status.code(),
                          absl::StrCat(prompt, status.message().substr(field.size())));
    }
  }
  if (prompt_index < 0 || status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), " (", prompt, ")"));
}

int HttpStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status) {
  const int http = HttpStatus(status);
  std::string type = "internal_error";
  if (http == 400 || http == 404) type = "invalid_request_error";
  if (http == 401) type = "authentication_error";
  if (http == 429) type = "rate_limit_error";
  if (http == 503) type = "service_unavailable";
  // The field the message names ("max_tokens: ..."), as OpenAI's `param`.
  Json param;
  if (http == 400) {
    const absl::string_view m = status.message();
    const size_t colon = m.find(": ");
    if (colon != absl::string_view::npos &&
        m.substr(0, colon).find(' ') == absl::string_view::npos) {
      param = std::string(m.substr(0, colon));
    }
  }
  return Dump({{"error",
                {{"message", std::string(status.message())},
                 {"type", type},
                 {"param", param},
                 {"code", http}}}});
}

std::string HttpErrorJson(int http, std::string_view message) {
  return Dump({{"error",
                {{"message", std::string(message)},
                 {"type", http < 500 ? "invalid_request_error" : "internal_error"},
                 {"param", nullptr},
                 {"code", http}}}});
}

std::string CompletionJson(const CompletionHeader& h, const ChoiceFormat& format,
                           const std::vector<CompletionChoice>& choices, const Usage& usage) {
  Json j = Envelope(h, false);
  j["choices"] = Json::array();
  for (const CompletionChoice& c : choices) j["choices"].push_back(Choice(h, format, c, false));
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string CompletionChunkEvent(const CompletionHeader& h, const ChoiceFormat& format,
                                 const CompletionChoice& choice, bool include_usage) {
  Json j = Envelope(h, true);
  j["choices"] = Json::array({Choice(h, format, choice, true)});
  if (include_usage) j["usage"] = nullptr;
  return Event(j);
}

std::string UsageChunkEvent(const CompletionHeader& h, const Usage& usage) {
  Json j = Envelope(h, true);
  j["choices"] = Json::array();
  j["usage"] = UsageJson(usage);
  return Event(j);
}

std::string ErrorEvent(const absl::Status& status) {
  return absl::StrCat("data: ", ErrorJson(status), "\n\n");
}

std::string ModelsJson(const std::string& model, int64_t created, int max_model_len) {
  return Dump({{"object", "list"},
               {"data", Json::array({{{"id", model},
                                      {"object", "model"},
                                      {"created", created},
                                      {"owned_by", "saturn"},
                                      {"max_model_len", max_model_len}}})}});
}

std::string ApiFinishReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

}  // namespace saturn
