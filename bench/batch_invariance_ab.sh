#!/usr/bin/env bash
# What batch invariance costs on this CPU: saturn-bench-engine with --batch_invariant on and off,
# interleaved for N rounds (the order swaps each round, so drift on a shared machine hits both),
# decode at batch 1, 8, 64 and prefill at 64 and 512 tokens; per round the on/off ratio of each
# figure, then median, min and max. The ratio is the measure: each round's two runs share the
# machine's state of the moment.
#   bench/batch_invariance_ab.sh [--rounds 5] [--model small] [--dtype auto|f32|bf16]
#                                [--bin build/bench] [--json OUT]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
rounds=5 model=small dtype=auto bin=build/bench json=""
ab_parse_flags 2,8 "rounds model dtype bin json" "$@"
ab_check_rounds
engine="$bin/saturn-bench-engine"
ab_need_binaries build "$engine"
ab_setup
for ((r = 1; r <= rounds; r++)); do
  order="on off"; ((r % 2 == 0)) && order="off on"
  for mode in $order; do
    echo "round $r/$rounds: --batch_invariant=$mode" >&2
    "$engine" --model "$model" --dtype "$dtype" --backend cpu --batches 1,8,64 \
      --prefill_lens 64,512 --decode_tokens 32 --rounds 1 --batch_invariant "$mode" \
      --json "$tmp/$mode-$r.json" > "$tmp/$mode-$r.txt" 2>&1 ||
      { tail -20 "$tmp/$mode-$r.txt" >&2; exit 1; }
  done
done
python3 - "$tmp" "$rounds" "$model" "$dtype" "$json" <<'PY'
import json, statistics, sys
tmp, rounds, model, dtype, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def figures(path):
    d = json.load(open(path))
    f = {f"decode_b{r['batch']}": r["tokens_per_s"] for r in d["rows"]}
    f.update({f"prefill_{p['prompt_len']}": p["tokens_per_s"] for p in d["prefill"]})
    return f, d["device"], d["weight_dtype"]
per_round, device, wdt = [], "", ""
for r in range(1, rounds + 1):
    on, device, wdt = figures(f"{tmp}/on-{r}.json")
    off, _, _ = figures(f"{tmp}/off-{r}.json")
    per_round.append({"round": r, "on": on, "off": off,
                      "ratio": {k: on[k] / off[k] for k in on if k in off and off[k] > 0}})
keys = list(per_round[0]["ratio"])
print(f"{model}, {wdt} weights, {device}")
print("figure          " + "  ".join(f"r{r['round']:<5}" for r in per_round) + "   median   min    max")
summary = {}
for k in keys:
    rs = [r["ratio"][k] for r in per_round]
    summary[k] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs)}
    print(f"{k:<14}  " + "  ".join(f"{x:6.3f}" for x in rs) +
          f"   {summary[k]['median']:6.3f} {summary[k]['min']:6.3f} {summary[k]['max']:6.3f}")
print("(on / off tokens/s: under 1 is what invariance costs)")
if out:
    json.dump({"model": model, "weight_dtype": wdt, "device": device, "rounds": per_round,
               "ratio_on_over_off": summary}, open(out, "w"), indent=1)
    print(f"wrote {out}")
PY
