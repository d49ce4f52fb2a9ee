#!/usr/bin/env bash
# Token events on the engine thread (--event_thread=off) or on their own thread (on): what each
# costs the engine per step, through the real gRPC server. For every round, model and
# concurrency a fresh saturn-server runs in each mode, interleaved; saturn-load drives it and,
# mid-load, saturn-diag records the server's own step records. Prints per mode the tokens/s
# sampled over the recorded steps (the client's completed-request figure is in the JSON: at
# long steps a 10-s phase completes few requests) and the engine thread's microseconds per
# step (schedule, prepare, issue = the ops, postprocess = scheduler update + events, gap
# between steps); --json writes every row. Extra server flags (e.g. --threads 1) go after --.
#   bench/event_thread_ab.sh [--rounds 2] [--models "tiny small"] [--concurrency "1 64"]
#                            [--duration 10] [--bin build] [--json OUT] [-- SERVER FLAGS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
rounds=2 models="tiny small" concurrency="1 64" duration=10 bin=build json=""
ab_parse_flags 2,10 "rounds models concurrency duration bin json --" "$@"
extra=("${ab_rest[@]}")
ab_check_rounds
[[ "$duration" =~ ^[1-9][0-9]*$ ]] && ((duration >= 6)) ||
  { echo "--duration must be an integer >= 6 (s), got $duration" >&2; exit 2; }
server="$bin/server/saturn-server" load="$bin/clients/saturn-load" diag="$bin/clients/saturn-diag"
ab_need_binaries "$bin" "$server" "$load" "$diag"
ab_setup
record_s=$((duration / 2 - 1))
for ((r = 1; r <= rounds; r++)); do
  for model in $models; do
    for c in $concurrency; do
      for mode in off on; do
        tag="$model-c$c-$mode-$r"
        echo "round $r/$rounds: $model c=$c event_thread=$mode" >&2
        ab_start_server "$tmp/$tag.server.log" "$server" --model "$model" \
          --listen "127.0.0.1:$port" --max_num_seqs 256 --event_thread "$mode" "${extra[@]}"
        "$load" --target "127.0.0.1:$port" --concurrency "$c" --duration "$duration" \
          --num_requests 0 --min_measure_s 0 --input_len 16 --output_len 64 --ignore_eos \
          --progress=false --json "$tmp/$tag.load.json" > "$tmp/$tag.load.txt" 2>&1 &
        lpid=$!
        sleep $((duration / 2 + 1))
        "$diag" --target "127.0.0.1:$port" record --window "$record_s" -o "$tmp/$tag.rec.json" \
          > /dev/null 2>&1 || { echo "saturn-diag record failed ($tag)" >&2; exit 1; }
        wait "$lpid" || { tail -20 "$tmp/$tag.load.txt" >&2; exit 1; }
        ab_stop_server
      done
    done
  done
done
python3 - "$tmp" "$rounds" "$models" "$concurrency" "$json" <<'PY'
import json, statistics, sys
tmp, rounds, models, concs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
rows = []
for r in range(1, rounds + 1):
    for m in models:
        for c in concs:
            for mode in ("off", "on"):
                tag = f"{m}-c{c}-{mode}-{r}"
                load = json.load(open(f"{tmp}/{tag}.load.json"))
                rec = json.load(open(f"{tmp}/{tag}.rec.json"))
                cols = rec["step_columns"]
                steps = [dict(zip(cols, s)) for s in rec["steps"]]
                steps = [s for s in steps if s["start_us"] >= rec["begin_us"]]
                mean = lambda k: statistics.fmean(s[k] for s in steps)
                gaps = [b["start_us"] - a["end_us"] for a, b in zip(steps, steps[1:])]
                span_s = (steps[-1]["end_us"] - steps[0]["start_us"]) / 1e6 if steps else 0
                rows.append({"round": r, "model": m, "concurrency": int(c), "event_thread": mode,
                             "client_output_tok_s": load["phases"][0]["output_token_throughput"],
                             "output_tok_s": sum(s["num_sampled"] for s in steps) / span_s
                                             if span_s > 0 else 0.0,
                             "steps": len(steps), "batch": mean("num_seqs"),
                             "step_us": statistics.fmean(s["end_us"] - s["start_us"] for s in steps),
                             "schedule_us": mean("schedule_us"), "prepare_us": mean("prepare_us"),
                             "issue_us": mean("issue_us"), "postprocess_us": mean("postprocess_us"),
                             "gap_us": statistics.fmean(gaps) if gaps else 0.0})
hdr = "%-5s %-6s %4s %-4s %10s %6s %6s %9s %8s %8s %9s %8s %7s"
print(hdr % ("round", "model", "c", "evt", "tok/s", "steps", "batch", "step us", "sched",
             "prepare", "issue", "postproc", "gap"))
for x in rows:
    print("%-5d %-6s %4d %-4s %10.1f %6d %6.1f %9.1f %8.1f %8.1f %9.1f %8.1f %7.1f" % (
        x["round"], x["model"], x["concurrency"], x["event_thread"], x["output_tok_s"],
        x["steps"], x["batch"], x["step_us"], x["schedule_us"], x["prepare_us"], x["issue_us"],
        x["postprocess_us"], x["gap_us"]))
print("\non/off, median over rounds: sampled tok/s, engine postprocess us")
for m in models:
    for c in concs:
        pick = lambda mode, k: [x[k] for x in rows if x["model"] == m and
                                x["concurrency"] == int(c) and x["event_thread"] == mode]
        tok = statistics.median(a / b for a, b in zip(pick("on", "output_tok_s"), pick("off", "output_tok_s")))
        print("  %-6s c=%-4s tok/s x%.3f   postprocess %.1f -> %.1f us" % (
            m, c, tok, statistics.median(pick("off", "postprocess_us")),
            statistics.median(pick("on", "postprocess_us"))))
if out:
    json.dump({"rows": rows}, open(out, "w"), indent=1)
PY
