// OpenAI wire format <-> saturn.v1.GenerateRequest and the response JSON (nlohmann-json).
#include "server/http/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/gguf.h"
#include "kernels/base/json_depth.h"
#include "kernels/base/read_file.h"

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

Json Choice(const ChoiceFormat& f, const CompletionChoice& choice) {
  const CompletionPiece& piece = choice.piece;
  Json c = {
      {"index", choice.index},
      {"text", piece.text},
      {"logprobs", f.with_logprobs ? Logprobs(piece, f.token_text, choice.text_offset) : Json()},
      {"finish_reason", choice.finish_reason.empty() ? Json() : Json(choice.finish_reason)}};
  if (f.return_token_ids) c["token_ids"] = piece.token_ids;
  return c;
}

Json Envelope(const CompletionHeader& h) {
  return {{"id", h.id}, {"object", "text_completion"}, {"created", h.created}, {"model", h.model}};
}

// Text that came from byte tokens may not be valid UTF-8 (token strings in logprobs): the
// invalid bytes become U+FFFD rather than failing the response.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Event(const Json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body_text) {
  if (absl::Status s = CheckJsonDepth(body_text, kMaxJsonDepth, "request body"); !s.ok()) {
    return s;
  }
  Json body = Json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Bad("request body", "not valid JSON");
  if (!body.is_object()) return Bad("request body", "must be a JSON object");
  CompletionRequest r;
  if (const Json* m = Field(body, "model"); m != nullptr) {
    if (!m->is_string()) return Bad("model", "must be a string");
    r.model = m->get<std::string>();
  }
  if (absl::Status s = Unsupported(body); !s.ok()) return s;
  if (absl::Status s = Prompts(body, &r.requests); !s.ok()) return s;
  v1::GenerateRequest g;  // the fields every prompt's request shares
  std::optional<int64_t> max_tokens, top_k, seed, logprobs;
  std::optional<double> temperature, top_p;
  if (absl::Status s = GetBoundedInt(body, "max_tokens", 1, INT32_MAX, &max_tokens); !s.ok()) {
    return s;
  }
  if (absl::Status s = GetBoundedInt(body, "top_k", -1, INT32_MAX, &top_k); !s.ok()) return s;
  if (absl::Status s = GetInt(body, "seed", &seed); !s.ok()) return s;
  if (absl::Status s = GetBoundedInt(body, "logprobs", 0, kMaxLogprobs, &logprobs); !s.ok()) {
    return s;
  }
  if (absl::Status s = GetFloat(body, "temperature", &temperature); !s.ok()) return s;
  if (absl::Status s = GetFloat(body, "top_p", &top_p); !s.ok()) return s;
  if (max_tokens.has_value()) g.set_max_tokens(static_cast<int32_t>(*max_tokens));
  g.set_temperature(static_cast<float>(temperature.value_or(1.0)));  // OpenAI's default
  if (top_p.has_value()) g.set_top_p(static_cast<float>(*top_p));
  if (top_k.has_value()) g.set_top_k(static_cast<int32_t>(*top_k < 0 ? 0 : *top_k));
  if (seed.has_value()) g.set_seed(*seed);
  if (logprobs.has_value()) g.set_logprobs(static_cast<int32_t>(*logprobs));
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
  // Each request holds only its prompt, `g` none: merged, each has both.
  for (v1::GenerateRequest& one : r.requests) one.MergeFrom(g);
  return r;
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
  Json j = Envelope(h);
  j["choices"] = Json::array();
  for (const CompletionChoice& c : choices) j["choices"].push_back(Choice(format, c));
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string CompletionChunkEvent(const CompletionHeader& h, const ChoiceFormat& format,
                                 const CompletionChoice& choice, bool include_usage) {
  Json j = Envelope(h);
  j["choices"] = Json::array({Choice(format, choice)});
  if (include_usage) j["usage"] = nullptr;
  return Event(j);
}

std::string UsageChunkEvent(const CompletionHeader& h, const Usage& usage) {
  Json j = Envelope(h);
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

absl::Status ChatTemplateRefusal(const std::string& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".gguf") {
    // A GGUF file carries its template in tokenizer.chat_template, Jinja as in
    // tokenizer_config.json (llama.cpp renders it with its own Jinja subset).
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(model);
    const bool has = f.ok() && (*f)->metadata().contains("tokenizer.chat_template");
    return Bad("messages",
               has ? "the file's chat template (tokenizer.chat_template) is a Jinja program, "
                     "which Saturn does not render, so it cannot apply it faithfully; render "
                     "the conversation yourself and send it to /v1/completions"
                   : "the GGUF file has no chat template (tokenizer.chat_template); use "
                     "/v1/completions");
  }
  if (!fs::is_directory(model, ec)) {
    return Bad("messages", absl::StrCat("the built-in model \"", model,
                                        "\" has no chat template; use /v1/completions"));
  }
  bool has_template = fs::exists(fs::path(model) / "chat_template.jinja", ec);
  // Read on this request, so its size and depth are checked here too (the parser recurses
  // per level).
  absl::StatusOr<std::string> text =
      ReadFileBounded((fs::path(model) / "tokenizer_config.json").string(), kMaxConfigFileBytes);
  if (text.ok() && JsonNestingDepth(*text) <= kMaxFileJsonDepth) {
    Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
    has_template = has_template || (j.is_object() && j.contains("chat_template"));
  }
  return Bad("messages",
             has_template
                 ? "the checkpoint's chat template is a Jinja program, which Saturn does not "
                   "render, so it cannot apply it faithfully; render the conversation yourself "
                   "and send it to /v1/completions"
                 : "the checkpoint has no chat template (tokenizer_config.json's chat_template); "
                   "use /v1/completions");
}

}  // namespace saturn
