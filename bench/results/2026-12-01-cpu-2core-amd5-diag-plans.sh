#!/bin/bash
# Plan error after following the top action (server-side and client-side), 9 mixed workloads:
# mean prompt and output lengths >= 64 with +-50 % jitter, so every request has >= 32 of each.
# Probe steps after calibration (default budget), ramp-up until as many requests finished as
# clients run, 10 s after window. Records the machine's load before and after each run.
# Args: OUT folder. RETURN_S=S (optional): go back to the first options and clients after the
# after window and measure that load again for S seconds (an A-B-A run, saturn-bench-plan --return_s).
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=$1; mkdir -p $OUT; uptime; lscpu | grep -E "^CPU\(s\)|Model name"
i=0
# prompt output start_seqs clients
for w in "64 64 2 16" "128 64 2 12" "64 128 2 16" "96 96 4 24" "512 64 2 8" "128 128 2 16" \
         "64 64 1 1" "128 64 32 2" "64 128 32 1"; do
  set -- $w; i=$((i+1))
  echo "== w$i load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  ./build/bench/saturn-bench-plan --model=small --prompt_len=$1 --max_tokens=$2 --start_seqs=$3 \
    --concurrency=$4 --before_s=4 --after_s=10 --return_s=${RETURN_S:-0} --json=$OUT/plan_$i.json > $OUT/plan_$i.txt 2>&1
  echo "== w$i prompt $1 output $2 start_seqs $3 clients $4: $(grep -E '^probe:|^plan:|^plan, A-B-A|^machine drift:' $OUT/plan_$i.txt | tr '\n' ' ') load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
uptime
