#!/usr/bin/env bash
# Two saturn-server replicas (tiny model, CPU backend) behind Debian's nginx running the config
# docs/FLEET.md gives (docs/fleet/nginx.conf, its addresses swapped for local ports):
#   1. saturn-load through nginx's grpc_pass: every request completes, both replicas served
#      (their saturn:request_success_total counters add up to the requests sent);
#   2. saturn-diag get --target a,b (straight to the replicas) prints the fleet line;
#   3. the OpenAI-compatible API through nginx's proxy_pass (when saturn-server has
#      --http_port): completions, plain and streamed (server-sent events ending in
#      data: [DONE]), reach both replicas;
#   4. one replica is SIGKILLed while saturn-load runs through nginx: only requests in flight
#      while it died fail (at most the concurrency), every request sent once it is gone
#      completes, and the survivor's counter grew by at least those requests.
# Installs nothing: skips with a message where nginx is missing (tests/run_all.sh installs it;
# in CI, CI=true, a missing nginx fails the test instead).
# nginx runs in the foreground, one process, with its prefix, config, pid and logs in a temp
# folder, on loopback ports picked free at run time; every process started here is killed on
# exit. No timing is asserted.
#   bash tests/e2e/fleet_nginx.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
server="$build/server/saturn-server"
load="$build/clients/saturn-load"
diag="$build/clients/saturn-diag"
template="$root/docs/fleet/nginx.conf"

say() { echo "e2e fleet_nginx: $*"; }
fail() {
  echo "e2e fleet_nginx: FAILED: $*" >&2
  exit 1
}

nginx_bin="$(command -v nginx || true)"
[ -n "$nginx_bin" ] || [ ! -x /usr/sbin/nginx ] || nginx_bin=/usr/sbin/nginx
if [ -z "$nginx_bin" ]; then
  [ "${CI:-}" != "true" ] || fail "nginx is not installed (tests/run_all.sh installs it)"
  say "skipped: nginx is not installed (bash .ci/deps.sh nginx installs Debian's nginx)"
  exit 0
fi
for b in "$server" "$load" "$diag"; do
  [ -x "$b" ] || fail "$b is not built (build the saturn-server, saturn-load and saturn-diag targets)"
done
command -v curl >/dev/null || fail "curl is missing"
command -v python3 >/dev/null || fail "python3 is missing"

# The config FLEET.md shows is the file the test runs.
awk '/^```nginx$/ {f = 1; next} /^```$/ {if (f) exit} f' "$root/docs/FLEET.md" |
  diff -u "$template" - >/dev/null ||
  fail "docs/FLEET.md's nginx block differs from docs/fleet/nginx.conf: keep them the same"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/saturn_fleet_nginx.XXXXXX")"
pids=()  # everything started here, killed on exit
stop_pid() {  # pid: SIGTERM, up to 5 s, then SIGKILL; reaped
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
forget() {  # pid: reaped already, not to be killed on exit
  local keep=() p
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do stop_pid "$p"; done
  if [ "$rc" -ne 0 ]; then
    for f in "$tmp"/*.log "$tmp"/nginx/*.log "$tmp"/*.txt; do
      [ -f "$f" ] || continue
      echo "---- ${f#"$tmp"/} (last 40 lines)" >&2
      tail -n 40 "$f" >&2
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# What the built tools offer (read whole: grep -q would cut a pipe short under pipefail).
server_help="$("$server" --help 2>&1 || true)"
load_help="$("$load" --help 2>&1 || true)"
http_front=0
grep -q -- '--http_port' <<<"$server_help" && http_front=1

# ---- replicas
declare -A pid grpc metrics http
start_replica() {  # name
  local extra=()
  [ "$http_front" = 1 ] && extra+=(--http_port=-1)
  "$server" --model=tiny --backend=cpu --threads=1 --calibration=quick --listen=127.0.0.1:0 \
    --max_model_len=512 --kv_cache_mb=32 --shutdown_grace=2s --metrics_port=-1 "${extra[@]}" \
    >"$tmp/$1.log" 2>&1 &
  pid[$1]=$!
  pids+=("$!")
}
wait_replica() {  # name: until it serves and has logged its ports (at most 240 s)
  local log="$tmp/$1.log"
  for _ in $(seq 1200); do
    if grep -q '(SERVING)' "$log" && grep -q 'metrics at http://' "$log" &&
      { [ "$http_front" = 0 ] || grep -q 'OpenAI-compatible API at http://' "$log"; }; then
      grpc[$1]="$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$log" | head -n 1)"
      metrics[$1]="$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$log" | head -n 1)"
      http[$1]="$(sed -n 's|.*OpenAI-compatible API at http://\([^/]*\)/v1.*|\1|p' "$log" | head -n 1)"
      [ -n "${grpc[$1]}" ] || fail "replica $1: no gRPC port in its log"
      [ -n "${metrics[$1]}" ] || fail "replica $1: no metrics port in its log"
      return 0
    fi
    kill -0 "${pid[$1]}" 2>/dev/null || fail "replica $1 exited before serving"
    sleep 0.2
  done
  fail "replica $1 did not start serving"
}
scrape() {  # name: its /metrics text (fails when the replica does not answer)
  curl -sf --max-time 20 "http://${metrics[$1]}/metrics" || fail "replica $1's /metrics did not answer"
}
# Requests a replica finished (saturn:request_success_total, reasons length and stop).
served() {
  local text
  text="$(scrape "$1")" || return 1
  awk '/^saturn:request_success_total\{finished_reason="(length|stop)"\}/ {s += $NF}
       END {printf "%d\n", s}' <<<"$text"
}
# Requests a replica holds (running or waiting).
holding() {
  local text
  text="$(scrape "$1")" || return 1
  awk '/^saturn:num_requests_(running|waiting) / {s += $NF} END {printf "%d\n", s}' <<<"$text"
}
start_replica a
start_replica b
wait_replica a
wait_replica b
say "replicas a ${grpc[a]} (metrics ${metrics[a]}) and b ${grpc[b]} (metrics ${metrics[b]})"

# ---- nginx, on two free loopback ports (picked again if another process takes one first)
ng="$tmp/nginx"
mkdir -p "$ng"
free_ports() {
  python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])'
}
up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
write_config() {  # grpc_port http_port
  local a_http="${http[a]:-127.0.0.1:9}" b_http="${http[b]:-127.0.0.1:9}"  # 9: nothing there
  local swaps=("10.0.0.1:50051" "${grpc[a]}" "10.0.0.2:50051" "${grpc[b]}"
    "10.0.0.1:8000" "$a_http" "10.0.0.2:8000" "$b_http"
    "listen 50050 " "listen 127.0.0.1:$1 " "listen 8080;" "listen 127.0.0.1:$2;")
  local text
  text="$(cat "$template")"
  for ((i = 0; i < ${#swaps[@]}; i += 2)); do
    [[ "$text" == *"${swaps[i]}"* ]] || fail "docs/fleet/nginx.conf no longer has \"${swaps[i]}\""
    text="${text//"${swaps[i]}"/"${swaps[i + 1]}"}"
  done
  [[ "$text" != *10.0.0.* ]] || fail "docs/fleet/nginx.conf has an address the test does not swap"
  printf '%s\n' "$text" >"$ng/saturn.conf"
  # The process-level settings a system nginx has in /etc/nginx/nginx.conf, here in $ng.
  cat >"$ng/nginx.conf" <<EOF
daemon off;
master_process off;
pid nginx.pid;
error_log error.log info;
events { worker_connections 512; }
http {
    log_format upstream '\$request \$status upstream \$upstream_addr \$upstream_status';
    access_log access.log upstream;
    client_body_temp_path client_body;
    proxy_temp_path proxy;
    fastcgi_temp_path fastcgi;
    uwsgi_temp_path uwsgi;
    scgi_temp_path scgi;
    include saturn.conf;
}
EOF
}
for attempt in 1 2 3; do
  read -r ng_grpc ng_http < <(free_ports)
  write_config "$ng_grpc" "$ng_http"
  "$nginx_bin" -t -q -p "$ng/" -c "$ng/nginx.conf" -e "$ng/error.log" 2>"$tmp/nginx-t.txt" ||
    fail "nginx -t rejects the config: $(cat "$tmp/nginx-t.txt")"
  "$nginx_bin" -p "$ng/" -c "$ng/nginx.conf" -e "$ng/error.log" >"$tmp/nginx.txt" 2>&1 &
  nginx_pid=$!
  pids+=("$nginx_pid")
  for _ in $(seq 300); do
    { up "$ng_grpc" && up "$ng_http"; } && break
    kill -0 "$nginx_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$nginx_pid" 2>/dev/null && up "$ng_grpc" && up "$ng_http" && break
  stop_pid "$nginx_pid"
  forget "$nginx_pid"
  [ "$attempt" -lt 3 ] || fail "nginx did not start (error.log above)"
done
say "nginx $("$nginx_bin" -v 2>&1 | sed 's/.*: //'): gRPC 127.0.0.1:$ng_grpc, HTTP 127.0.0.1:$ng_http"

# ---- 1. saturn-load through nginx reaches both replicas
a0="$(served a)"
b0="$(served b)"
t0="$(date +%s)"
"$load" --target="127.0.0.1:$ng_grpc" --concurrency=4 --num_requests=32 --input_len=16 \
  --output_len=16 --min_measure_s=0 --progress=false --json="$tmp/balanced.json" \
  >"$tmp/balanced.txt" 2>&1 || fail "saturn-load through nginx exited $?"
a1="$(served a)"
b1="$(served b)"
sent="$(python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))["phases"][0]
ok = [r for r in p["requests"] if r["status"] == "OK"]
assert len(p["requests"]) == 32 and len(ok) == 32, (p["sent"], p["errors_by_code"])
print(len(ok))' "$tmp/balanced.json")" || fail "saturn-load's requests through nginx did not all complete"
say "balanced: $sent requests through nginx, a served $((a1 - a0)), b served $((b1 - b0))"
[ "$((a1 - a0))" -gt 0 ] || fail "replica a served nothing"
[ "$((b1 - b0))" -gt 0 ] || fail "replica b served nothing"
[ "$((a1 - a0 + b1 - b0))" -eq "$sent" ] ||
  fail "the replicas' counters add up to $((a1 - a0 + b1 - b0)), not the $sent requests sent"

# ---- 2. the fleet line, straight to the replicas, over the load just run
window=$(($(date +%s) - t0 + 2))
"$diag" get --target="${grpc[a]},${grpc[b]}" --window="$window" >"$tmp/fleet.txt" 2>&1 ||
  fail "saturn-diag get --target a,b exited $?"
grep -q '^fleet      2 replicas' "$tmp/fleet.txt" || fail "no fleet line"
grep -Eq '^verdict    (IMBALANCED|SATURATED|UNDERLOADED|BALANCED): ' "$tmp/fleet.txt" ||
  fail "no fleet verdict"
"$diag" get --json --target="${grpc[a]},${grpc[b]}" --window="$window" >"$tmp/fleet.json" \
  2>"$tmp/fleet-json.txt" || fail "saturn-diag get --json --target a,b exited $?"
python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
assert j["fleet"]["kind"] in ("IMBALANCED", "SATURATED", "UNDERLOADED", "BALANCED"), j["fleet"]
assert len(j["replicas"]) == 2
for r in j["replicas"]:
    assert r["ok"] and r["report"]["profile"]["steps"] > 0, r["target"]' "$tmp/fleet.json" ||
  fail "the fleet JSON does not show two replicas that ran steps"
say "fleet: $(grep '^verdict' "$tmp/fleet.txt")"

# ---- 3. the OpenAI-compatible API through nginx
if [ "$http_front" = 1 ]; then
  base="http://127.0.0.1:$ng_http"
  a0="$(served a)"
  b0="$(served b)"
  curl -sf --max-time 60 "$base/health" >/dev/null || fail "GET /health through nginx failed"
  curl -sf --max-time 60 "$base/v1/models" >"$tmp/models.json" || fail "GET /v1/models failed"
  model="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["data"][0]["id"])' \
    "$tmp/models.json")" || fail "GET /v1/models through nginx names no model"
  for i in 1 2 3 4; do
    curl -sf --max-time 120 "$base/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\": \"$model\", \"prompt\": [1, 2, 3, $i], \"max_tokens\": 8, \"ignore_eos\": true}" \
      >"$tmp/completion$i.json" || fail "POST /v1/completions $i through nginx failed"
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
assert c["object"] == "text_completion" and len(c["choices"]) == 1, c
assert c["usage"]["completion_tokens"] == 8, c["usage"]' "$tmp/completion$i.json" ||
      fail "completion $i: $(cat "$tmp/completion$i.json")"
  done
  curl -sfN --max-time 120 "$base/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": [1, 2, 3], \"max_tokens\": 8, \"ignore_eos\": true, \"stream\": true}" \
    >"$tmp/stream.txt" || fail "streamed POST /v1/completions through nginx failed"
  python3 -c 'import json, sys
events = [l[len("data: "):] for l in open(sys.argv[1]).read().splitlines() if l.startswith("data: ")]
assert len(events) >= 2 and events[-1] == "[DONE]", events[-3:]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "text_completion" for c in chunks)
assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]' "$tmp/stream.txt" ||
    fail "the event stream through nginx is not completion chunks ending in data: [DONE]"
  a1="$(served a)"
  b1="$(served b)"
  say "HTTP: 5 completions through nginx (1 streamed), a served $((a1 - a0)), b served $((b1 - b0))"
  [ "$((a1 - a0))" -gt 0 ] || fail "no HTTP request reached replica a"
  [ "$((b1 - b0))" -gt 0 ] || fail "no HTTP request reached replica b"
  [ "$((a1 - a0 + b1 - b0))" -eq 5 ] || fail "the counters grew by $((a1 - a0 + b1 - b0)), not 5"
  # saturn-load over the HTTP API through nginx, where it speaks it (--api openai).
  if grep -q -- '--api (.*openai' <<<"$load_help"; then
    "$load" --api=openai --target="$base" --concurrency=4 --num_requests=24 --input_len=16 \
      --output_len=16 --min_measure_s=0 --progress=false --json="$tmp/http.json" \
      >"$tmp/http.txt" 2>&1 || fail "saturn-load --api openai through nginx exited $?"
    a2="$(served a)"
    b2="$(served b)"
    python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))["phases"][0]
assert len(p["requests"]) == 24 and all(r["status"] == "OK" for r in p["requests"]), p["errors_by_code"]' \
      "$tmp/http.json" || fail "saturn-load --api openai's requests through nginx did not all complete"
    say "HTTP load: 24 requests through nginx, a served $((a2 - a1)), b served $((b2 - b1))"
    [ "$((a2 - a1))" -gt 0 ] || fail "saturn-load --api openai reached replica a with nothing"
    [ "$((b2 - b1))" -gt 0 ] || fail "saturn-load --api openai reached replica b with nothing"
    [ "$((a2 - a1 + b2 - b1))" -eq 24 ] || fail "the counters grew by $((a2 - a1 + b2 - b1)), not 24"
  else
    say "HTTP load skipped: this saturn-load has no --api openai"
  fi
else
  say "HTTP half skipped: this saturn-server has no --http_port"
fi

# ---- 4. kill replica b while saturn-load runs through nginx
conc=4
n=300  # the kill comes a few requests in; the rest runs on the survivor
a0="$(served a)"
b0="$(served b)"
"$load" --target="127.0.0.1:$ng_grpc" --concurrency="$conc" --num_requests="$n" --input_len=16 \
  --output_len=64 --min_measure_s=0 --max_errors=0 --progress=false --json="$tmp/kill.json" \
  >"$tmp/kill.txt" 2>&1 &
load_pid=$!
pids+=("$load_pid")
# Once b has finished a few of this run's requests and holds some, kill it.
ready=0
for _ in $(seq 1200); do
  kill -0 "$load_pid" 2>/dev/null || fail "saturn-load ended before replica b was killed"
  sb="$(served b)"
  hb="$(holding b)"
  if [ "$sb" -ge $((b0 + 3)) ] && [ "$hb" -gt 0 ]; then
    ready=1
    break
  fi
  sleep 0.1
done
[ "$ready" = 1 ] || fail "replica b never served 3 of the run's requests while holding more"
b_before="$(served b)"
a_kill="$(served a)"
kill_unix="$(date +%s.%N)"
kill -KILL "${pid[b]}"
wait "${pid[b]}" 2>/dev/null || true  # reaped: every socket of b is closed
dead_unix="$(date +%s.%N)"
forget "${pid[b]}"
rc=0
wait "$load_pid" || rc=$?
forget "$load_pid"
a_end="$(served a)"
summary="$(python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))["phases"][0]
reqs = p["requests"]
assert len(reqs) == int(sys.argv[2]), ("sent", len(reqs), p["stop_reason"])
# saturn-load times requests from the phase start (start_unix_s); the kill, and the moment b
# was reaped, on that clock. 10 ms of slack for reading two clocks, nothing about speed.
kill_s = float(sys.argv[3]) - p["start_unix_s"]
dead_s = float(sys.argv[4]) - p["start_unix_s"]
failed = [r for r in reqs if r["status"] != "OK"]
# Only requests b had taken fail: each was sent before b was gone and ended after the kill.
odd = [r for r in failed if r["send_s"] > dead_s + 0.01 or r["end_s"] < kill_s - 0.01]
assert not odd, ("failed outside the kill", kill_s, dead_s, odd[:3])
# Every request sent once b was gone went to a (b refuses, nginx passes the call on).
late = [r for r in reqs if r["send_s"] > dead_s + 0.01]
bad = [r for r in late if r["status"] != "OK"]
assert not bad, ("failed after b was gone", dead_s, bad[:3])
print(len(failed), len(reqs) - len(failed), len(late))' "$tmp/kill.json" "$n" "$kill_unix" "$dead_unix")" ||
  fail "saturn-load's run through the kill: see the assertion above"
read -r errors ok after <<<"$summary"
codes="$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["phases"][0]["errors_by_code"])' "$tmp/kill.json")"
say "kill: $errors of $n requests failed ($codes), $ok completed, $after sent once b was gone;" \
  "a served $((a_end - a_kill)) after the kill"
[ "$errors" -ge 1 ] || fail "replica b held streams when killed, yet no request failed"
[ "$errors" -le "$conc" ] || fail "$errors requests failed: more than the $conc that were in flight"
[ "$rc" -eq 1 ] || fail "saturn-load exited $rc, expected 1 (requests failed)"
[ "$after" -gt 0 ] || fail "no request was sent once b was gone"
[ "$((a_end - a_kill))" -ge "$after" ] ||
  fail "a's counter grew by $((a_end - a_kill)) after the kill, fewer than the $after requests sent since"
# b took part in this run before it was killed; a never served more than completed.
[ "$((b_before - b0))" -ge 3 ] || fail "b served $((b_before - b0)) of this run's requests before the kill"
[ "$((a_end - a0))" -le "$ok" ] || fail "a served $((a_end - a0)) requests, more than the $ok that completed"
say "ok"
