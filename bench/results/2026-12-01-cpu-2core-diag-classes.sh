#!/bin/bash
# Done-when class runs: CPU backend, `small`, two busy background processes on the 2 cores.
# Usage: 2026-12-01-cpu-2core-diag-classes.sh OUTDIR PART (PART a: conc 1, conc 64, trickle; b: 1500-token prompts, max_num_seqs 2 under 32 clients)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=$1; PART=$2; mkdir -p $OUT
B=./build
yes > /dev/null & Y1=$!; yes > /dev/null & Y2=$!
trap 'kill $Y1 $Y2 $SP 2>/dev/null' EXIT
start() {  # port, extra flags
  $B/server/saturn-server --model=small --listen=127.0.0.1:$1 --max_model_len=2048 "${@:2}" > $OUT/server_$1.log 2>&1 & SP=$!
  for i in $(seq 120); do grep -q "(SERVING)" $OUT/server_$1.log && break; sleep 0.5; done
}
load() {  # name, port, flags
  $B/clients/saturn-load --target=127.0.0.1:$2 --progress=false --json=$OUT/$1.json "${@:3}" > $OUT/$1.txt 2>&1
  echo "== $1: $(grep -m1 -A3 diagnosis $OUT/$1.txt | head -4)"
}
uptime
if [ "$PART" = a ]; then
  start 50941
  load conc1 50941 --concurrency=1 --input_len=64 --output_len=64 --num_requests=4 --warmup_requests=0
  load conc64 50941 --concurrency=64 --input_len=32 --output_len=16 --num_requests=64 --warmup_requests=0
  load trickle 50941 --request_rate=0.25 --input_len=64 --output_len=32 --num_requests=4 --warmup_requests=0
  kill $SP; wait $SP 2>/dev/null
else
  start 50942
  load prompt1500 50942 --concurrency=4 --input_len=1500 --output_len=2 --num_requests=4 --warmup_requests=0
  kill $SP; wait $SP 2>/dev/null
  start 50943 --max_num_seqs=2
  load seqs2_32clients 50943 --concurrency=32 --input_len=32 --output_len=32 --num_requests=40 --warmup_requests=0
  kill $SP; wait $SP 2>/dev/null
fi
grep calibration $OUT/server_*.log
