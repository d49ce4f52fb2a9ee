#!/usr/bin/env bash
# Saturn's main job, from a fresh Debian 12 machine: install what is missing, build, start the
# server on the built-in model (CUDA where a GPU is present, else the CPU backend), drive it
# with a short concurrency sweep, print the load table and the server's diagnosis, write the
# roofline SVG and the JSON results, and stop the server.
#
#   bash clients/demo.sh
#
# Environment (all optional):
#   SATURN_BUILD=DIR       build folder (default: ./build)
#   SATURN_OUT=DIR         results folder (default: ./out)
#   SATURN_MODEL=NAME      preset or checkpoint directory (default: small)
#   SATURN_BACKEND=KIND    auto | cpu | cuda (default: auto)
#   SATURN_SWEEP=LIST      closed-loop concurrencies (default: 1,4,16)
#   SATURN_REQUESTS=N      requests per sweep point (default: 24)
#   SATURN_MIN_MEASURE_S=S each point keeps sending until S seconds of load after warm-up
#                          (default: 10; saturn-load --min_measure_s)
#   SATURN_SKIP_BUILD=1    use an existing build (the CI's shortened run does)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SATURN_BUILD:-$root/build}"
out="${SATURN_OUT:-$root/out}"
model="${SATURN_MODEL:-small}"
backend="${SATURN_BACKEND:-auto}"
sweep="${SATURN_SWEEP:-1,4,16}"
requests="${SATURN_REQUESTS:-24}"
min_measure="${SATURN_MIN_MEASURE_S:-10}"
mkdir -p "$out"

step() { printf '\n== %s\n' "$*"; }

if [ "${SATURN_SKIP_BUILD:-0}" != 1 ]; then
  step "installing missing packages"
  bash "$root/.ci/deps.sh"
  step "building (Release) in $build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/cmake.log"
  cmake --build "$build" -j"$(nproc)" --target saturn-server saturn-load saturn-diag
fi
server_bin="$build/server/saturn-server"
load_bin="$build/clients/saturn-load"
diag_bin="$build/clients/saturn-diag"
for b in "$server_bin" "$load_bin" "$diag_bin"; do
  [ -x "$b" ] || { echo "demo: $b is missing (build first, or unset SATURN_SKIP_BUILD)" >&2; exit 1; }
done

step "starting saturn-server (model $model, backend $backend)"
log="$out/server.log"
"$server_bin" --listen 127.0.0.1:0 --model "$model" --backend "$backend" \
  --save_calibration "$out/calibration.json" > "$log" 2>&1 &
server_pid=$!
stop_server() {
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap stop_server EXIT
target=""
for _ in $(seq 1 600); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: the server exited during start-up:" >&2
    cat "$log" >&2
    exit 1
  fi
  if grep -q "(SERVING)" "$log"; then
    target="$(grep -o 'listening on [^ ]*' "$log" | head -1 | awk '{print $3}')"
    break
  fi
  sleep 0.5
done
[ -n "$target" ] || { echo "demo: the server did not become ready in 300 s" >&2; cat "$log" >&2; exit 1; }
cat "$log"

step "load: closed-loop sweep, concurrency $sweep, $requests requests each (or more: ${min_measure} s of load after warm-up)"
"$load_bin" --target "$target" --concurrency "$sweep" --num_requests "$requests" \
  --min_measure_s "$min_measure" --input_len 64 --output_len 32 \
  --json "$out/load.json" --csv "$out/load.csv" --progress=false | tee "$out/load.txt"

step "diagnosis of the last 30 s of serving"
"$diag_bin" get --target "$target" --window 30
"$diag_bin" get --target "$target" --window 30 --json > "$out/diagnosis.json"
"$diag_bin" roofline --target "$target" --window 30 -o "$out/roofline.svg"
"$diag_bin" trace --target "$target" --steps 200 -o "$out/trace.json"

step "stopping the server"
stop_server
trap - EXIT
echo
echo "results: $out/load.txt $out/load.json $out/load.csv $out/diagnosis.json $out/roofline.svg"
echo "         $out/trace.json $out/calibration.json $out/server.log"
# The load table's last section: verdict, why, what to change, predicted gain.
sed -n '/^== in plain words ==$/,$p' "$out/load.txt"
