#!/usr/bin/env bash
# The OpenAI-compatible API as its users reach it: the OpenAI Python SDK (PyPI `openai`, in a
# venv this script makes beside the build) runs tests/e2e/openai_sdk_client.py against a
# saturn-server (tiny model, CPU, --auth_scope=all with a token, a --chat_template for chat
# completions), then curl checks the
# server-sent event framing on the wire. Outside CI, a machine that cannot reach PyPI skips
# the SDK part with a message; in CI (CI=true) that is a failure.
#   bash tests/e2e/openai_sdk.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
say() { echo "e2e openai_sdk: $*"; }
fail() {
  echo "e2e openai_sdk: FAILED: $*" >&2
  exit 1
}
command -v curl >/dev/null || fail "curl is missing (bash .ci/deps.sh installs it)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/saturn_openai_sdk.XXXXXX")"
server_pid=""
cleanup() {
  local rc=$?
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  [ "$rc" -eq 0 ] || tail -n 30 "$tmp/server.log" >&2 2>/dev/null || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

# The SDK's venv (made once per build folder; pip only where it is missing).
venv="$build/openai-venv"
if ! "$venv/bin/python3" -c "import openai" 2>/dev/null; then
  say "installing the OpenAI SDK into $venv"
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q openai; } >"$tmp/pip.log" 2>&1 || true
fi
sdk=1
if ! "$venv/bin/python3" -c "import openai" 2>/dev/null; then
  [ "${CI:-}" != "true" ] || { cat "$tmp/pip.log" >&2; fail "cannot install the openai package"; }
  say "the OpenAI SDK could not be installed (no PyPI?): its part is skipped"
  sdk=0
fi

token="tok-$RANDOM$RANDOM"
printf '%s\n' "$token" >"$tmp/token"
# Made here, not by the background job's redirection, which a loaded machine may run only after
# the first read below (that read, failing under set -e, ended a CI run once).
: >"$tmp/server.log"
# A chat template in the idiom of ChatML models' (the preset has none of its own).
cat >"$tmp/chat.jinja" <<'JINJA'
{%- for m in messages -%}
{%- if m.role not in ['system', 'user', 'assistant'] -%}
{{ raise_exception('roles must be system, user or assistant') }}
{%- endif -%}
<|im_start|>{{ m.role }}
{{ m.content | trim }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
JINJA
"$build/server/saturn-server" --model=tiny --backend=cpu --threads=1 --listen=127.0.0.1:0 \
  --http_port=-1 --max_model_len=512 --kv_cache_mb=32 --calibration=quick --shutdown_grace=2s \
  --chat_template="$tmp/chat.jinja" \
  --auth_token_file="$tmp/token" --auth_scope=all >"$tmp/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 1200); do
  url="$(sed -n 's|.*OpenAI-compatible API at \(http://[^ ]*\)/v1.*|\1|p' "$tmp/server.log")"
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "saturn-server exited"
  sleep 0.1
done
[ -n "$url" ] || fail "saturn-server did not log its API address"

if [ "$sdk" -eq 1 ]; then
  "$venv/bin/python3" "$root/tests/e2e/openai_sdk_client.py" "$url/v1" "$token" ||
    fail "the OpenAI SDK client failed"
fi

# The wire: headers, one "data: " line per event, a blank line after each, [DONE] last.
curl -sS -N -D "$tmp/headers" -H "Authorization: Bearer $token" "$url/v1/completions" \
  -d '{"prompt":[1,2,3],"max_tokens":5,"stream":true,"ignore_eos":true}' >"$tmp/sse"
grep -qi '^content-type: text/event-stream' "$tmp/headers" || fail "stream content type: $(cat "$tmp/headers")"
python3 - "$tmp/sse" <<'PY' || fail "server-sent event framing"
import json, sys
body = open(sys.argv[1]).read()
assert body.endswith("data: [DONE]\n\n"), body[-80:]
events = body.split("\n\n")[:-1]
assert all(e.startswith("data: ") and "\n" not in e for e in events), events
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
PY
code="$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/completions" -d '{"prompt":[1]}')"
[ "$code" = 401 ] || fail "no token: HTTP $code, expected 401"
say "ok"
