#!/usr/bin/env bash
# saturn-server at --tensor_parallel 2 under a real launcher (Open MPI's mpirun), tiny model on
# the CPU backend, one thread a rank:
#   1. outside a launcher it refuses to start, naming the mpirun line (exit 2);
#   2. under mpirun it serves: saturn-load's requests all complete, the diagnosis's op classes
#      carry the comm class (the all-reduces, timed as ops) and its tensor_parallel part the
#      ranks, and /metrics the tensor-parallel gauges;
#   3. SIGTERM to rank 0 ends every rank cleanly: mpirun exits 0;
#   4. over loopback TCP (--mca btl self,tcp, as between hosts) it serves too; a worker killed
#      mid-serve ends the job within 10 s with the dead rank named, and the load ends (requests
#      fail, nothing hangs);
#   5. a step that fails on rank 0 after the ranks started it ends every rank within 30 s,
#      saying why (the workers wait in its collectives; going on would hang them).
# Installs nothing: skips with a message where mpirun is missing (tests/run_all.sh installs Open
# MPI through .ci/deps.sh; in CI, CI=true, a missing mpirun fails the test instead). No timing is
# asserted but the bounds that say "nothing hangs".
#   bash tests/e2e/tensor_parallel.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
server="$build/server/saturn-server"
load="$build/clients/saturn-load"
diag="$build/clients/saturn-diag"

say() { echo "e2e tensor_parallel: $*"; }
fail() {
  echo "e2e tensor_parallel: FAILED: $*" >&2
  exit 1
}
mpirun_bin="$(command -v mpirun || true)"
if [ -z "$mpirun_bin" ]; then
  [ "${CI:-}" != "true" ] || fail "mpirun is not installed (.ci/deps.sh installs openmpi-bin)"
  say "skipped: mpirun is not installed (bash .ci/deps.sh installs Debian's Open MPI)"
  exit 0
fi
for b in "$server" "$load" "$diag"; do
  [ -x "$b" ] || fail "$b is not built"
done
# As root (CI) Open MPI asks for consent; two ranks may be more than the cores; containers often
# withhold the ptrace rights shared memory's single-copy (CMA) needs.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

tmp="$(mktemp -d "${TMPDIR:-/tmp}/saturn_tp.XXXXXX")"
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do
    kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ]; then
    for f in "$tmp"/*.log; do
      [ -f "$f" ] || continue
      echo "---- ${f#"$tmp"/} (last 40 lines)" >&2
      tail -n 40 "$f" >&2
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. no launcher
rc=0
"$server" --tensor_parallel=2 --model=tiny --backend=cpu >"$tmp/alone.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "started outside a launcher it exited $rc, not 2"
grep -q 'mpirun -np 2 saturn-server --tensor_parallel 2' "$tmp/alone.log" ||
  fail "outside a launcher it did not name the mpirun line"
say "outside a launcher: refused, naming the mpirun line"

job=0
addr=""
start_job() {  # name, extra mpirun flags...: the job in its own process group, serving
  local name="$1"
  shift
  setsid "$mpirun_bin" -np 2 "$@" "$server" --tensor_parallel=2 --model=tiny --backend=cpu \
    --threads=1 --calibration=quick --probe_steps_ms=0 --listen=127.0.0.1:0 --max_model_len=256 \
    --kv_cache_mb=32 --shutdown_grace=2s --metrics_port=-1 >"$tmp/$name.log" 2>&1 &
  job=$!
  pids+=("$job")
  for _ in $(seq 1200); do
    if grep -q '(SERVING)' "$tmp/$name.log"; then
      addr="$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$tmp/$name.log" | head -n 1)"
      [ -n "$addr" ] || fail "$name: no address in its log"
      return 0
    fi
    kill -0 "$job" 2>/dev/null || fail "$name: the job exited before serving"
    sleep 0.2
  done
  fail "$name: did not start serving"
}
rank_pid() {  # rank: the pid of that rank of the current job
  local p
  for p in $(pgrep -P "$job"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return 0
    fi
  done
  fail "rank $1 of the job was not found"
}
job_rc=0
wait_job() {  # seconds: the job's exit code in job_rc, or a failure past the bound
  local deadline=$((SECONDS + $1))
  while kill -0 "$job" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the job did not end within $1 s"
    sleep 0.2
  done
  job_rc=0
  wait "$job" || job_rc=$?
}

# ---- 2. serving over shared memory
start_job shm
grep -q 'tensor_parallel 2 over' "$tmp/shm.log" || fail "rank 0 did not log its group"
grep -q 'rank 1: shard 1 of 2 of tiny' "$tmp/shm.log" || fail "rank 1 did not log its shard"
"$load" --target="$addr" --concurrency=4 --num_requests=12 --input_len=16 --output_len=16 \
  --min_measure_s=0 --json="$tmp/load.json" >"$tmp/load.log" 2>&1 || fail "saturn-load failed against TP=2"
python3 - "$tmp/load.json" <<'PY' || fail "not every request completed"
import json, sys
phase = json.load(open(sys.argv[1]))["phases"][0]
ok, sent = phase["completed"], phase["sent"]
sys.exit(0 if ok == sent and ok >= 12 and phase["errors"] == 0 else 1)
PY
"$diag" get --target="$addr" --json >"$tmp/diag.json" 2>"$tmp/diag.log" || fail "saturn-diag get failed"
grep -q '"op_class": "comm"' "$tmp/diag.json" || fail "the diagnosis has no comm class"
python3 - "$tmp/diag.json" <<'PY' || fail "the diagnosis's tensor_parallel part is missing or wrong"
import json, sys
tp = json.load(open(sys.argv[1]))["tensor_parallel"]
ok = tp["ranks"] == 2 and int(tp["steps"]) > 0 and 0 < tp["comm_share"] < 1 and tp["load_balance"] > 0
sys.exit(0 if ok else 1)
PY
metrics="$(sed -n 's|.*metrics at http://\([^/]*\)/metrics.*|\1|p' "$tmp/shm.log" | head -n 1)"
[ -n "$metrics" ] || fail "no metrics address in rank 0's log"
if command -v curl >/dev/null; then
  page="$(curl -sf --max-time 20 "http://$metrics/metrics")" || fail "/metrics did not answer"
  for g in saturn:tensor_parallel_ranks saturn:tp_collective_share saturn:tp_wait_share \
    saturn:tp_load_balance saturn:weight_bytes; do
    grep -q "^$g " <<<"$page" || fail "/metrics has no $g"
  done
fi
"$diag" info --target="$addr" >"$tmp/info.txt" 2>&1 || fail "saturn-diag info failed"
grep -q "2 ranks over Open MPI" "$tmp/info.txt" || grep -q "2 ranks over MPICH" "$tmp/info.txt" ||
  fail "saturn-diag info does not say the model is split over 2 ranks"
say "TP=2 served 12 requests; the diagnosis has the comm class and the ranks; /metrics the gauges; info the ranks"

# ---- 3. SIGTERM to rank 0
kill -TERM "$(rank_pid 0)"
wait_job 30
[ "$job_rc" = 0 ] || fail "after SIGTERM to rank 0 mpirun exited $job_rc, not 0"
say "SIGTERM to rank 0: every rank left, mpirun exit 0"

# ---- 4. loopback TCP, then a worker killed mid-serve
start_job tcp --mca btl self,tcp
"$load" --target="$addr" --concurrency=2 --num_requests=4 --input_len=8 --output_len=8 \
  --min_measure_s=0 >"$tmp/load_tcp.log" 2>&1 || fail "saturn-load failed against TP=2 over TCP"
timeout 120 "$load" --target="$addr" --concurrency=4 --num_requests=100000 --input_len=16 \
  --output_len=64 --max_errors=4 --min_measure_s=0 >"$tmp/load_kill.log" 2>&1 &
loader=$!
pids+=("$loader")
sleep 2
kill -KILL "$(rank_pid 1)"
wait_job 10
[ "$job_rc" != 0 ] || fail "with rank 1 killed mpirun exited 0"
grep -q 'rank 1' "$tmp/tcp.log" || fail "the job's log does not name rank 1"
lrc=0
wait "$loader" || lrc=$?
[ "$lrc" != 124 ] || fail "saturn-load hung after the job ended"
say "over TCP: served; rank 1 killed -> job ended (exit $job_rc) naming rank 1, load ended (exit $lrc)"

# ---- 5. a step that fails on rank 0 after the ranks started it (SATURN_TP_TEST_FAIL_STEP,
# test-only): rank 1 waits in that step's all-reduce, so every rank ends, saying why, instead of
# rank 0 sharing its next step into rank 1's wait
SATURN_TP_TEST_FAIL_STEP=60 start_job fail
timeout 120 "$load" --target="$addr" --concurrency=2 --num_requests=100000 --input_len=16 \
  --output_len=64 --max_errors=4 --min_measure_s=0 >"$tmp/load_fail.log" 2>&1 &
loader=$!
pids+=("$loader")
wait_job 30
[ "$job_rc" != 0 ] || fail "with rank 0's step failed mpirun exited 0"
grep -q 'rank 0 of 2: a step failed after the ranks started it' "$tmp/fail.log" ||
  fail "rank 0 did not say why the job ended"
lrc=0
wait "$loader" || lrc=$?
[ "$lrc" != 124 ] || fail "saturn-load hung after the job ended"
say "a step failed on rank 0 after it was shared -> every rank ended (exit $job_rc), saying why"
say "ok"
