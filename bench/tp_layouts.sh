#!/usr/bin/env bash
# Tensor parallelism against its alternatives on this host's cores, interleaved per round: TP=2
# with 1 thread a rank (mpirun), TP=1 with 2 threads, and 2 replicas of 1 thread each
# (saturn-load taking turns between them), the same model and closed-loop load for each. Per
# layout and concurrency: the client's output tok/s and TPOT p50, and for TP=2 the server's
# tensor-parallel figures over the load (collectives' share of the step, wait share, load
# balance, slowest rank, mean all-reduce), and the plan's set_tensor_parallel prediction checked
# against TP=1's own report (decode tokens per second of its steps, the plan's basis).
# --json writes every row. Run it on a quiet machine.
#   bench/tp_layouts.sh [--rounds 3] [--model small] [--concurrency "1 8"] [--duration 10]
#                       [--bin build] [--json OUT]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
rounds=3 model=small concurrency="1 8" duration=10 bin=build json=""
ab_parse_flags 2,9 "rounds model concurrency duration bin json" "$@"
ab_check_rounds
[[ "$duration" =~ ^[1-9][0-9]*$ ]] && ((duration >= 4)) ||
  { echo "--duration must be an integer >= 4 (s), got $duration" >&2; exit 2; }
server="$bin/server/saturn-server" load="$bin/clients/saturn-load" diag="$bin/clients/saturn-diag"
ab_need_binaries "$bin" "$server" "$load" "$diag"
command -v mpirun > /dev/null || { echo "mpirun is missing (bash .ci/deps.sh)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ab_setup
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  pids=()
}
trap 'stop_all; ab_cleanup' EXIT
wait_serving() {  # log
  for _ in $(seq 1 240); do grep -q "(SERVING)" "$1" && return 0; sleep 0.5; done
  tail -5 "$1" >&2
  exit 1
}
common=(--model "$model" --backend cpu --calibration quick --probe_steps_ms 0 --max_num_seqs 64)
rows="$tmp/rows.jsonl"
: > "$rows"
for ((r = 1; r <= rounds; r++)); do
  for c in $concurrency; do
    for layout in tp2x1 tp1x2 replicas2x1; do
      tag="$layout-c$c-$r"
      echo "round $r/$rounds: $layout c=$c" >&2
      targets="127.0.0.1:$port"
      case "$layout" in
        tp2x1)
          setsid mpirun -np 2 "$server" --tensor_parallel 2 --threads 1 "${common[@]}" \
            --listen "127.0.0.1:$port" > "$tmp/$tag.log" 2>&1 &
          pids+=($!)
          wait_serving "$tmp/$tag.log" ;;
        tp1x2)
          "$server" --threads 2 "${common[@]}" --listen "127.0.0.1:$port" > "$tmp/$tag.log" 2>&1 &
          pids+=($!)
          wait_serving "$tmp/$tag.log" ;;
        replicas2x1)
          "$server" --threads 1 "${common[@]}" --listen "127.0.0.1:$port" > "$tmp/$tag.a.log" 2>&1 &
          pids+=($!)
          "$server" --threads 1 "${common[@]}" --listen "127.0.0.1:$((port + 1))" \
            > "$tmp/$tag.b.log" 2>&1 &
          pids+=($!)
          wait_serving "$tmp/$tag.a.log"
          wait_serving "$tmp/$tag.b.log"
          targets="127.0.0.1:$port,127.0.0.1:$((port + 1))" ;;
      esac
      "$load" --target "$targets" --concurrency "$c" --duration "$duration" --num_requests 0 \
        --min_measure_s 0 --input_len 16 --output_len 64 --ignore_eos --progress=false \
        --json "$tmp/$tag.load.json" > "$tmp/$tag.load.txt" 2>&1 ||
        { tail -20 "$tmp/$tag.load.txt" >&2; exit 1; }
      "$diag" --target "127.0.0.1:$port" get --json --window "$duration" > "$tmp/$tag.diag.json" \
        2> /dev/null || echo '{}' > "$tmp/$tag.diag.json"
      python3 - "$tmp/$tag.load.json" "$tmp/$tag.diag.json" "$layout" "$c" "$r" >> "$rows" << 'PY'
import json, sys
load = json.load(open(sys.argv[1]))["phases"][0]
diag = json.load(open(sys.argv[2]))
tp = diag.get("tensor_parallel", {})
plan_tp1 = [a for a in diag.get("plan", []) if a.get("kind") == "set_tensor_parallel"]
print(json.dumps({"layout": sys.argv[3], "concurrency": int(sys.argv[4]), "round": int(sys.argv[5]),
                  "output_tok_s": load["output_token_throughput"],
                  "tpot_p50_ms": load["tpot_ms"].get("p50"),
                  "bottleneck": diag.get("bottleneck", ""),
                  "comm_share": tp.get("commShare", tp.get("comm_share")),
                  "wait_share": tp.get("waitShare", tp.get("wait_share")),
                  "load_balance": tp.get("loadBalance", tp.get("load_balance")),
                  "slowest_rank": tp.get("slowestRank", tp.get("slowest_rank")),
                  "mean_collective_us": tp.get("meanCollectiveUs", tp.get("mean_collective_us")),
                  "decode_step_tok_s": diag.get("profile", {}).get("decode_step_tokens_per_s"),
                  # The action's ratio (after / before) on this window's own decode step rate:
                  # the plan predicts at the batch earlier actions reach, the ratio holds at any.
                  "plan_tp1_tok_s": (diag["profile"]["decode_step_tokens_per_s"] *
                                     plan_tp1[0]["tokens_per_s_after"] /
                                     plan_tp1[0]["tokens_per_s_before"]) if plan_tp1 else None,
                  "plan_tp1_expected_error": plan_tp1[0].get("expected_error") if plan_tp1 else None}))
PY
      stop_all
      port=$((port + 2))
    done
  done
done
python3 - "$rows" "$model" "$json" << 'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"model {sys.argv[2]}: output tok/s (TPOT p50 ms) per round; TP=2's collectives")
print(f"{'c':>3} {'layout':<12} {'median tok/s':>13}  rounds")
for c in sorted({r["concurrency"] for r in rows}):
    for layout in ["tp2x1", "tp1x2", "replicas2x1"]:
        rs = [r for r in rows if r["concurrency"] == c and r["layout"] == layout]
        if not rs: continue
        med = statistics.median(r["output_tok_s"] for r in rs)
        each = ", ".join(f"{r['output_tok_s']:.1f} ({r['tpot_p50_ms'] or 0:.2f})" for r in rs)
        print(f"{c:>3} {layout:<12} {med:>13.1f}  {each}")
        for r in rs:
            if r["comm_share"] is not None:
                print(f"{'':>17}round {r['round']}: {r['bottleneck']}, collectives "
                      f"{100 * r['comm_share']:.1f}% of the step, mean {r['mean_collective_us'] or 0:.1f} us, "
                      f"wait {100 * (r['wait_share'] or 0):.0f}%, load balance {r['load_balance'] or 1:.2f}, "
                      f"slowest rank {r['slowest_rank'] or 0}")
print("the plan at TP=2 (serve at tensor_parallel 1) against TP=1 x 2's own decode step tok/s:")
for c in sorted({r["concurrency"] for r in rows}):
    pred = [r["plan_tp1_tok_s"] for r in rows if r["concurrency"] == c and r["layout"] == "tp2x1"]
    meas = [r["decode_step_tok_s"] for r in rows if r["concurrency"] == c and r["layout"] == "tp1x2"]
    errs = [r["plan_tp1_expected_error"] for r in rows if r["concurrency"] == c and r["layout"] == "tp2x1"]
    if any(p is None for p in pred) or not meas or any(m is None for m in meas):
        print(f"{c:>3} no prediction (the plan offered no set_tensor_parallel) or no TP=1 figure")
        continue
    p, m = statistics.median(pred), statistics.median(meas)
    print(f"{c:>3} predicted {p:.1f} (each {', '.join(f'{x:.1f}' for x in pred)}; expected error "
          f"+-{100 * statistics.median(errs):.0f}%), measured {m:.1f} (each "
          f"{', '.join(f'{x:.1f}' for x in meas)}): error {100 * (p / m - 1):+.1f}%")
if sys.argv[3]:
    json.dump({"model": sys.argv[2], "rows": rows}, open(sys.argv[3], "w"), indent=1)
PY
