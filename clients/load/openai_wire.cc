// The OpenAI-compatible completions wire format as saturn-load uses it (see openai_wire.h).
#include "clients/load/openai_wire.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/base/json_depth.h"
#include "nlohmann/json.hpp"

namespace saturn::clients {
namespace {

using nlohmann::json;

// A server's reply, parsed only when it nests no deeper than any real reply: the parser
// recurses per level, so a broken server's body 100k levels deep would overflow this stack.
// Too deep reads as not JSON.
json ParseReply(const std::string& text) {
  if (JsonNestingDepth(text) > kMaxFileJsonDepth) return json(json::value_t::discarded);
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

constexpr size_t kMaxMessageBytes = 300;

std::string Clip(std::string s) {
  if (s.size() > kMaxMessageBytes) s = s.substr(0, kMaxMessageBytes) + "...";
  return s;
}

// The message inside an error object or string, "" when there is none.
std::string MessageOf(const json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (!e.is_object()) return "";
  for (const char* key : {"message", "detail", "error"}) {
    auto it = e.find(key);
    if (it == e.end()) continue;
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_null()) return it->dump();
  }
  return "";
}

}  // namespace

std::string HttpTarget::Url() const {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(https ? "https://" : "http://", v6 ? "[" : "", host, v6 ? "]" : "", ":",
                      port);
}

bool LooksLikeUrl(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  return absl::StartsWith(lower, "http://") || absl::StartsWith(lower, "https://");
}

absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& flag, const std::string& text) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": expected http://host:port or https://host:port, got \"", text, "\" (", why, ")"));
  };
  HttpTarget t;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "https://")) {
    t.https = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return bad("no http:// or https://");
  }
  absl::ConsumeSuffix(&rest, "/");
  absl::ConsumeSuffix(&rest, "/v1");
  if (rest.find('/') != absl::string_view::npos) return bad("a path other than /v1");
  absl::string_view port_text;
  if (absl::ConsumePrefix(&rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) return bad("an IPv6 address needs its closing ]");
    t.host = std::string(rest.substr(0, close));
    rest.remove_prefix(close + 1);
    if (!rest.empty() && !absl::ConsumePrefix(&rest, ":")) return bad("junk after the address");
    port_text = rest;
  } else {
    const size_t colon = rest.rfind(':');
    t.host = std::string(rest.substr(0, colon));
    if (colon != absl::string_view::npos) port_text = rest.substr(colon + 1);
    if (t.host.find(':') != std::string::npos) return bad("write an IPv6 address as [addr]");
  }
  if (t.host.empty()) return bad("no host");
  if (port_text.empty()) {
    t.port = t.https ? 443 : 80;
  } else if (!absl::SimpleAtoi(port_text, &t.port) || t.port < 1 || t.port > 65535) {
    return bad("the port must be in [1, 65535]");
  }
  return t;
}

std::string CompletionBody(const WorkItem& item, const CompletionOptions& o) {
  json j = {{"model", o.model},
            {"max_tokens", item.max_tokens},
            {"temperature", o.temperature},
            {"seed", o.seed},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (!item.prompt_text.empty()) {
    j["prompt"] = item.prompt_text;
  } else {
    j["prompt"] = item.prompt_token_ids;
  }
  if (o.ignore_eos) j["ignore_eos"] = true;
  if (o.return_token_ids) j["return_token_ids"] = true;
  return j.dump();
}

absl::StatusOr<ModelList> ParseModelList(const std::string& body) {
  const json j = ParseReply(body);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GET /v1/models: expected {\"data\": [{\"id\": ...}]}, got: ", Clip(body)));
  }
  ModelList out;
  for (const json& m : j["data"]) {
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
    out.ids.push_back(m["id"].get<std::string>());
    const auto len = m.find("max_model_len");
    out.max_model_len.push_back(
        len != m.end() && len->is_number_integer() ? std::max(0, len->get<int>()) : 0);
    const auto owner = m.find("owned_by");
    out.owned_by.push_back(owner != m.end() && owner->is_string() ? owner->get<std::string>() : "");
  }
  if (out.ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GET /v1/models lists no model id: ", Clip(body)));
  }
  return out;
}

std::string HttpStatusName(int status) { return absl::StrCat("HTTP_", status); }

std::string ErrorMessage(const std::string& body) {
  const json j = ParseReply(body);
  if (!j.is_discarded()) {
    std::string m = j.is_object() && j.contains("error") ? MessageOf(j["error"]) : MessageOf(j);
    if (!m.empty()) return Clip(m);
  }
  std::string text(absl::StripAsciiWhitespace(body));
  return text.empty() ? "(empty body)" : Clip(text);
}

void CompletionStreamReader::Fail(const std::string& status, const std::string& message) {
  failed_ = true;
  rec_->status = status;
  rec_->error_message = message;
}

bool CompletionStreamReader::OnData(const std::string& data, double now_s) {
  if (done_ || failed_) return false;
  if (absl::StripAsciiWhitespace(data) == "[DONE]") {
    done_ = true;
    rec_->has_final = true;
    rec_->final_s = now_s;
    return false;
  }
  const json j = ParseReply(data);
  if (j.is_discarded() || !j.is_object()) {
    Fail("STREAM_ERROR", absl::StrCat("an event is not a JSON object: ", Clip(data)));
    return false;
  }
  if (j.contains("error") && !j["error"].is_null()) {
    const std::string m = MessageOf(j["error"]);
    Fail("STREAM_ERROR", m.empty() ? Clip(j["error"].dump()) : Clip(m));
    return false;
  }
  const auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty()) {
    const json& c = (*choices)[0];
    int tokens = 0;
    bool content = false;
    if (c.is_object()) {
      const auto text = c.find("text");
      content =
          text != c.end() && text->is_string() && !text->get_ref<const std::string&>().empty();
      const auto ids = c.find("token_ids");
      if (ids != c.end() && ids->is_array() && !ids->empty()) {
        tokens = static_cast<int>(ids->size());
        content = true;
      }
    }
    if (content) {
      const int n = tokens > 0 ? tokens : 1;
      rec_->token_times_s.push_back(now_s);
      rec_->token_counts.push_back(n);
      chunk_tokens_ += n;
    }
  }
  const auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    const auto completion = usage->find("completion_tokens");
    if (completion != usage->end() && completion->is_number_integer()) {
      usage_completion_ = completion->get<int>();
    }
    const auto prompt = usage->find("prompt_tokens");
    if (prompt != usage->end() && prompt->is_number_integer()) {
      rec_->prompt_tokens = prompt->get<int>();
    }
  }
  return true;
}

void CompletionStreamReader::Finish(bool cut_off) {
  rec_->output_tokens = usage_completion_ >= 0 ? usage_completion_ : chunk_tokens_;
  if (done_ || failed_ || !rec_->ok()) return;  // ended, or the transport said why not
  Fail("STREAM_BROKEN", cut_off ? "the stream broke off inside an event, before data: [DONE]"
                                : "the stream ended before data: [DONE]");
}

}  // namespace saturn::clients
