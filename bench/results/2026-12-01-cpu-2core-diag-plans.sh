#!/bin/bash
# Server-side plan error on 6 mixed workloads (prompts and outputs >= 32 tokens), quiet machine.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=$1; mkdir -p $OUT; uptime
i=0
for w in "32 32 2 16" "64 64 2 16" "128 32 2 12" "32 128 2 16" "96 96 4 24" "48 64 1 8"; do
  set -- $w; i=$((i+1))
  ./build/bench/saturn-bench-plan --model=small --prompt_len=$1 --max_tokens=$2 --start_seqs=$3 --concurrency=$4 --before_s=4 --after_s=6 --json=$OUT/plan_$i.json > $OUT/plan_$i.txt 2>&1
  echo "== w$i prompt $1 output $2 start_seqs $3 clients $4: $(grep -iE 'error|predicted' $OUT/plan_$i.txt | tail -2 | tr '\n' ' ')"
done
