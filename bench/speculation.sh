#!/usr/bin/env bash
# N-gram speculative decoding, on against off, and the plans that weigh it (issue 53). Per round:
#   A/B at --low concurrency (1) and --high (64): greedy requests of --input_len random tokens
#        and --output_len output tokens (a random-weight model falls into loops the proposer
#        catches) on a fresh saturn-server with speculation off, then with --speculative ngram
#        --num_speculative_tokens K: output tok/s, TPOT, the server's acceptance.
#   follow: at each concurrency a server starts with speculation off and saturn-load
#        --follow_plan runs --duration s phases: the plan's top action is followed once and the
#        phase runs again (at --low: "speculate K tokens", predicted from the proposals the server
#        scored while off); the same with speculation on at --high ("turn speculation off" where
#        the verify rows cost more than they give). Predicted against measured tok/s.
# Prints a table; --json writes every figure.
#   bench/speculation.sh [--rounds 3] [--model small] [--k 4] [--input_len 32] [--output_len 256]
#                        [--low 1] [--high 64] [--requests 8] [--duration 20] [--bin build]
#                        [--json OUT]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
rounds=3 model=small k=4 input_len=32 output_len=256 low=1 high=64 requests=8 duration=20
bin=build json=""
ab_parse_flags 2,17 "rounds model k input_len output_len low high requests duration bin json" "$@"
ab_check_rounds
server="$bin/server/saturn-server" load="$bin/clients/saturn-load"
ab_need_binaries "$bin" "$server" "$load"
ab_setup
workload=(--input_len "$input_len" --output_len "$output_len" --progress=false)
serve() {  # serve K: a fresh server with K proposed tokens (0: off)
  local spec=(--speculative none)
  [[ $1 -gt 0 ]] && spec=(--speculative ngram --num_speculative_tokens "$1")
  ab_start_server "$tmp/server.log" "$server" --model "$model" --listen "127.0.0.1:$port" \
    --max_num_seqs "$high" --max_num_seqs_limit "$((2 * high))" "${spec[@]}"
}
for ((r = 1; r <= rounds; r++)); do
  for c in "$low" "$high"; do
    n=$((c > requests ? 2 * c : requests))
    for kk in 0 "$k"; do
      echo "round $r/$rounds: concurrency $c, speculation $kk" >&2
      serve "$kk"
      "$load" --target "127.0.0.1:$port" "${workload[@]}" --concurrency "$c" --num_requests "$n" \
        --json "$tmp/ab-$c-$kk-$r.json" > "$tmp/ab-$c-$kk-$r.txt" 2>&1 ||
        { tail -20 "$tmp/ab-$c-$kk-$r.txt" >&2; exit 1; }
      ab_stop_server
    done
  done
  for spec in "$low:0" "$high:$k"; do
    c=${spec%%:*} kk=${spec##*:}
    echo "round $r/$rounds: follow the plan at concurrency $c, speculation $kk" >&2
    serve "$kk"
    "$load" --target "127.0.0.1:$port" "${workload[@]}" --concurrency "$c" --num_requests 0 \
      --duration "$duration" --follow_plan --json "$tmp/follow-$c-$r.json" \
      > "$tmp/follow-$c-$r.txt" 2>&1 || { tail -20 "$tmp/follow-$c-$r.txt" >&2; exit 1; }
    ab_stop_server
  done
done
PYTHONPATH="$(dirname "${BASH_SOURCE[0]}")" python3 - "$tmp" "$rounds" "$json" "$model $k $input_len $output_len $low $high" <<'PY'
import json, statistics, sys
from load_results import first_phase as phase, followed, server_profile as profile
tmp, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model, k, inp, outp, low, high = sys.argv[4].split()

rows, follows = [], []
for r in range(1, rounds + 1):
    for c in (low, high):
        off, on = phase(f"{tmp}/ab-{c}-0-{r}.json"), phase(f"{tmp}/ab-{c}-{k}-{r}.json")
        row = {"round": r, "concurrency": int(c)}
        for name, p in (("off", off), ("on", on)):
            prof = profile(p)
            row[name] = {"output_tok_s": p["output_token_throughput"],
                         "tpot_p50_ms": p["tpot_ms"]["p50"], "completed": p["completed"],
                         "errors": p["errors"],
                         "proposal_rate": prof.get("spec_proposal_rate", 0),
                         "acceptance_rate": prof.get("spec_acceptance_rate", 0),
                         "mean_accepted": prof.get("spec_mean_accepted", 0)}
        row["tok_s_ratio"] = row["on"]["output_tok_s"] / max(row["off"]["output_tok_s"], 1e-9)
        rows.append(row)
        follows += followed(f"{tmp}/follow-{c}-{r}.json", round=r, concurrency=int(c))

print(f"model {model}: {inp} random prompt tokens, {outp} greedy output tokens, K = {k}")
print("%-5s %5s %11s %11s %7s %10s %10s %8s %8s" % ("round", "conc", "tok/s off", "tok/s on",
      "ratio", "TPOT off", "TPOT on", "accept", "kept/p"))
for x in rows:
    print("%-5d %5d %11.1f %11.1f %6.2fx %10.2f %10.2f %7.0f%% %8.2f" % (
        x["round"], x["concurrency"], x["off"]["output_tok_s"], x["on"]["output_tok_s"],
        x["tok_s_ratio"], x["off"]["tpot_p50_ms"], x["on"]["tpot_p50_ms"],
        100 * x["on"]["acceptance_rate"], x["on"]["mean_accepted"]))
for c in (int(low), int(high)):
    rs = [x["tok_s_ratio"] for x in rows if x["concurrency"] == c]
    print("concurrency %d: median on/off %.2fx (every round: %s)" % (
        c, statistics.median(rs), ", ".join("%.2f" % v for v in rs)))
print("\nfollowed plans:")
for x in follows:
    if "note" in x:
        print("%-5d c=%-3d %s" % (x["round"], x["concurrency"], x["note"][:100]))
    else:
        print("%-5d c=%-3d %-56s predicted %8.1f measured %8.1f error %+6.1f%% (expected +-%.0f%%)"
              % (x["round"], x["concurrency"], x["action"][:56], x["predicted"], x["measured"],
                 100 * x["error"], 100 * x["expected_error"]))
if out:
    json.dump({"tool": "bench/speculation.sh", "model": model, "k": int(k), "input_len": int(inp),
               "output_len": int(outp), "ab": rows, "followed": follows}, open(out, "w"), indent=1)
    print("wrote " + out, file=sys.stderr)
PY
