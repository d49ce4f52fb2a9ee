#!/bin/bash
# Plan error (server-side and client-side actions) on 9 mixed workloads (prompts and outputs
# >= 32 tokens, one with 512-token prompts), quiet machine. Args: OUT folder.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=$1; mkdir -p $OUT; uptime; lscpu | grep -E "^CPU\(s\)|Model name"
i=0
# prompt output start_seqs clients
for w in "32 32 2 16" "64 64 2 16" "128 32 2 12" "32 128 2 16" "96 96 4 24" "512 64 2 8" \
         "64 64 1 1" "128 64 32 2" "32 128 32 1"; do
  set -- $w; i=$((i+1))
  ./build/bench/saturn-bench-plan --model=small --prompt_len=$1 --max_tokens=$2 --start_seqs=$3 --concurrency=$4 --before_s=4 --after_s=6 --json=$OUT/plan_$i.json > $OUT/plan_$i.txt 2>&1
  echo "== w$i prompt $1 output $2 start_seqs $3 clients $4: $(grep -E '^plan:|^decode tokens/s' $OUT/plan_$i.txt | tr '\n' ' ')"
done
