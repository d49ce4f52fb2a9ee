#!/usr/bin/env bash
# The same tensor-parallel server and load over the two transports Open MPI gives one host:
# shared memory (--mca btl self,vader, the default) and loopback TCP (--mca btl self,tcp, what
# crosses between hosts). Per round and transport: the calibrated all-reduce line, then the
# report after a closed-loop load (verdict, the tp lines, the COMMUNICATION_BOUND sentence when
# it is one). Interleaved rounds; run it on a quiet machine.
#   bench/tp_transports.sh [--rounds 2] [--model tiny] [--concurrency 64] [--duration 6]
#                          [--bin build]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
rounds=2 model=tiny concurrency=64 duration=6 bin=build
ab_parse_flags 2,8 "rounds model concurrency duration bin" "$@"
ab_check_rounds
server="$bin/server/saturn-server" load="$bin/clients/saturn-load" diag="$bin/clients/saturn-diag"
ab_need_binaries "$bin" "$server" "$load" "$diag"
command -v mpirun > /dev/null || { echo "mpirun is missing (bash .ci/deps.sh)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ab_setup
job=""
trap '[[ -n "$job" ]] && kill -TERM "$job" 2> /dev/null; wait 2> /dev/null; rm -rf "$tmp"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for btl in self,vader self,tcp; do
    log="$tmp/$btl-$r.log"
    setsid mpirun -np 2 --mca btl "$btl" "$server" --tensor_parallel 2 --threads 1 --model "$model" \
      --backend cpu --calibration quick --probe_steps_ms 0 --listen "127.0.0.1:$port" > "$log" 2>&1 &
    job=$!
    for _ in $(seq 1 240); do grep -q "(SERVING)" "$log" && break; sleep 0.5; done
    grep -q "(SERVING)" "$log" || { tail -5 "$log" >&2; exit 1; }
    "$load" --target "127.0.0.1:$port" --concurrency "$concurrency" --duration "$duration" \
      --num_requests 0 --min_measure_s 0 --input_len 16 --output_len 64 --ignore_eos \
      --progress=false > "$tmp/load.txt" 2>&1 || { tail -20 "$tmp/load.txt" >&2; exit 1; }
    echo "== round $r, --mca btl $btl, $model, c=$concurrency"
    grep -o "all-reduce [^,]*" "$log" | head -n 1
    "$diag" --target "127.0.0.1:$port" get --window "$((duration - 1))" 2> /dev/null |
      grep -E "^verdict|^tp|^ {11}(wait|an all-reduce|COMMUNICATION_BOUND)" || true
    kill -TERM "$(pgrep -P "$job" | head -n 1)" 2> /dev/null || true
    wait "$job" || true
    job=""
    port=$((port + 1))
  done
done
