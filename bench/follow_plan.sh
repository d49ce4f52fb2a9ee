#!/usr/bin/env bash
# Do the plans hold? For each model a saturn-server starts (as a user starts it), and
# saturn-load --follow_plan runs each workload: every phase's top plan action is followed once
# (options sent, or more clients) and the phase runs again; per followed action the prediction,
# the server's measurement over the follow-up phase and the error. N rounds (a fresh server
# each) show the spread on a shared machine. Prints a table; --json writes every row.
#   bench/follow_plan.sh [--rounds 2] [--models "tiny small"] [--concurrency 1,8]
#                        [--duration 8] [--bin build] [--json OUT]
# Each server starts at --max_num_seqs 4 (limit 64) so server-side raises are on offer too.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
rounds=2 models="tiny small" concurrency=1,8 duration=8 bin=build json=""
ab_parse_flags 2,9 "rounds models concurrency duration bin json" "$@"
ab_check_rounds
server="$bin/server/saturn-server" load="$bin/clients/saturn-load"
ab_need_binaries "$bin" "$server" "$load"
ab_setup
for ((r = 1; r <= rounds; r++)); do
  for model in $models; do
    echo "round $r/$rounds: $model" >&2
    ab_start_server "$tmp/server.log" "$server" --model "$model" --listen "127.0.0.1:$port" \
      --max_num_seqs 4 --max_num_seqs_limit 64
    "$load" --target "127.0.0.1:$port" --concurrency "$concurrency" --duration "$duration" \
      --num_requests 0 --input_len 32 --output_len 64 --progress=false --follow_plan \
      --json "$tmp/$model-$r.json" > "$tmp/$model-$r.txt" 2>&1 ||
      { tail -20 "$tmp/$model-$r.txt" >&2; exit 1; }
    ab_stop_server
  done
done
python3 - "$tmp" "$rounds" "$models" "$json" <<'PY'
import json, statistics, sys
tmp, rounds, models, out = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
rows = []
for r in range(1, rounds + 1):
    for m in models:
        j = json.load(open(f"{tmp}/{m}-{r}.json"))
        phases = j["phases"]
        for i, p in enumerate(phases):
            f = p.get("followed_plan")
            if not f:
                if p.get("follow_note"):
                    rows.append({"round": r, "model": m, "phase": p["label"], "note": p["follow_note"]})
                continue
            before = phases[i - 1]
            rows.append({"round": r, "model": m, "phase": before["label"], "action": f["action"],
                         "metric": f["metric"], "predicted": f["predicted"],
                         "measured": f["measured"], "error": f["error"],
                         "expected_error": f["expected_error"],
                         "client_output_tok_s": p["output_token_throughput"]})
print("%-5s %-6s %-6s %-58s %10s %10s %8s %8s" % ("round", "model", "phase", "action", "predicted",
                                                 "measured", "error", "expect"))
for x in rows:
    if "action" not in x:
        print("%-5d %-6s %-6s %s" % (x["round"], x["model"], x["phase"], x["note"][:100]))
        continue
    print("%-5d %-6s %-6s %-58s %10.1f %10.1f %+7.1f%% %7.0f%%" % (
        x["round"], x["model"], x["phase"], x["action"][:58], x["predicted"], x["measured"],
        100 * x["error"], 100 * x["expected_error"]))
errs = [abs(x["error"]) for x in rows if "action" in x]
if errs:
    print("followed %d actions: |error| median %.1f %%, max %.1f %%, %d of %d within 10 %%" % (
        len(errs), 100 * statistics.median(errs), 100 * max(errs),
        sum(e <= 0.10 for e in errs), len(errs)))
if out:
    json.dump({"tool": "bench/follow_plan.sh", "rounds": rounds, "models": models, "rows": rows},
              open(out, "w"), indent=1)
    print("wrote " + out, file=sys.stderr)
PY
