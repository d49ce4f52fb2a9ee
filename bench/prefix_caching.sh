#!/usr/bin/env bash
# Prefix caching, on against off, and the plan that turns it on (issue 53). Per round:
#   A/B: 32 requests sharing a --prefix_len-token prefix, each with its own --input_len tokens
#        and --output_len output tokens, --concurrency at a time, on a fresh saturn-server with
#        prefix caching off, then on: TTFT p50, output tok/s, the server's hit rate.
#   follow: a server with caching off and saturn-load --follow_plan on the same workload for
#        --duration s phases: the plan's action (enable_prefix_caching, predicted from the reuse
#        the server counted while off) is applied and the phase runs again; predicted against
#        measured output tok/s.
# Prints a table; --json writes every figure.
#   bench/prefix_caching.sh [--rounds 3] [--model small] [--prefix_len 1024] [--input_len 32]
#                           [--output_len 64] [--concurrency 8] [--requests 32] [--duration 20]
#                           [--bin build] [--json OUT]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
rounds=3 model=small prefix_len=1024 input_len=32 output_len=64 concurrency=8 requests=32
duration=20 bin=build json=""
ab_parse_flags 2,14 "rounds model prefix_len input_len output_len concurrency requests duration bin json" "$@"
ab_check_rounds
server="$bin/server/saturn-server" load="$bin/clients/saturn-load"
ab_need_binaries "$bin" "$server" "$load"
ab_setup
workload=(--prefix_len "$prefix_len" --input_len "$input_len" --output_len "$output_len"
          --concurrency "$concurrency" --progress=false)
for ((r = 1; r <= rounds; r++)); do
  for caching in off on; do
    echo "round $r/$rounds: caching $caching" >&2
    flag=--enable_prefix_caching
    [[ $caching == off ]] && flag=--noenable_prefix_caching
    ab_start_server "$tmp/server.log" "$server" --model "$model" --listen "127.0.0.1:$port" \
      --max_num_seqs "$concurrency" "$flag"
    "$load" --target "127.0.0.1:$port" "${workload[@]}" --num_requests "$requests" \
      --json "$tmp/ab-$caching-$r.json" > "$tmp/ab-$caching-$r.txt" 2>&1 ||
      { tail -20 "$tmp/ab-$caching-$r.txt" >&2; exit 1; }
    ab_stop_server
  done
  echo "round $r/$rounds: follow the plan" >&2
  ab_start_server "$tmp/server.log" "$server" --model "$model" --listen "127.0.0.1:$port" \
    --max_num_seqs "$concurrency" --noenable_prefix_caching
  "$load" --target "127.0.0.1:$port" "${workload[@]}" --num_requests 0 --duration "$duration" \
    --follow_plan --json "$tmp/follow-$r.json" > "$tmp/follow-$r.txt" 2>&1 ||
    { tail -20 "$tmp/follow-$r.txt" >&2; exit 1; }
  ab_stop_server
done
PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$tmp" "$rounds" "$json" "$model $prefix_len $input_len $output_len $concurrency $requests" <<'PY'
import json, statistics, sys
from load_results import first_phase as phase, followed, server_profile as profile
tmp, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model, prefix, inp, outp, conc, reqs = sys.argv[4].split()

rows, follows = [], []
for r in range(1, rounds + 1):
    off, on = phase(f"{tmp}/ab-off-{r}.json"), phase(f"{tmp}/ab-on-{r}.json")
    row = {"round": r}
    for name, p in (("off", off), ("on", on)):
        prof = profile(p)
        row[name] = {"ttft_p50_ms": p["ttft_ms"]["p50"], "output_tok_s": p["output_token_throughput"],
                     "completed": p["completed"], "errors": p["errors"],
                     "prefix_hit_rate": prof.get("prefix_hit_rate", 0),
                     "prefix_missed_rate": prof.get("prefix_missed_rate", 0)}
    row["ttft_ratio"] = row["off"]["ttft_p50_ms"] / max(row["on"]["ttft_p50_ms"], 1e-9)
    row["tok_s_ratio"] = row["on"]["output_tok_s"] / max(row["off"]["output_tok_s"], 1e-9)
    rows.append(row)
    follows += followed(f"{tmp}/follow-{r}.json", round=r)

print(f"model {model}: {reqs} requests of a shared {prefix}-token prefix + {inp} own tokens, "
      f"{outp} output tokens, concurrency {conc}")
print("%-5s %12s %12s %7s %12s %12s %7s %8s %8s" % ("round", "TTFT off ms", "TTFT on ms", "ratio",
      "tok/s off", "tok/s on", "ratio", "missed", "hit"))
for x in rows:
    print("%-5d %12.1f %12.1f %6.1fx %12.1f %12.1f %6.2fx %7.0f%% %7.0f%%" % (
        x["round"], x["off"]["ttft_p50_ms"], x["on"]["ttft_p50_ms"], x["ttft_ratio"],
        x["off"]["output_tok_s"], x["on"]["output_tok_s"], x["tok_s_ratio"],
        100 * x["off"]["prefix_missed_rate"], 100 * x["on"]["prefix_hit_rate"]))
print("median: TTFT %.1fx lower, output tok/s %.2fx" % (
    statistics.median(x["ttft_ratio"] for x in rows),
    statistics.median(x["tok_s_ratio"] for x in rows)))
print("\nfollowed plans (server caching off at start):")
for x in follows:
    if "note" in x:
        print("%-5d %s" % (x["round"], x["note"][:110]))
    else:
        print("%-5d %-60s predicted %8.1f measured %8.1f error %+6.1f%% (expected +-%.0f%%)" % (
            x["round"], x["action"][:60], x["predicted"], x["measured"], 100 * x["error"],
            100 * x["expected_error"]))
if out:
    json.dump({"tool": "bench/prefix_caching.sh", "model": model, "prefix_len": int(prefix),
               "input_len": int(inp), "output_len": int(outp), "concurrency": int(conc),
               "requests": int(reqs), "ab": rows, "followed": follows}, open(out, "w"), indent=1)
    print("wrote " + out, file=sys.stderr)
PY
