#!/usr/bin/env bash
# One command for the GPU machine: unpacks .gpu_bundle/ (made here by bench/gpu_bundle.sh),
# finds cuBLAS/cuBLASLt 13 wherever that machine installs them, checks with ldd that every
# binary loads, then runs the stages of one pass, each under its own timeout inside the
# pass's budget. A failing stage is recorded and the next one runs; a binary that cannot
# load stops the run at once with the missing libraries named.
#
#   pass 1 (default, <= 300 s): nvidia-smi, every tests/kernels/cuda binary, compute-sanitizer
#     memcheck over the sampling, attention and capture tests, saturn-bench-engine small at
#     batch 1..64 with --graphs=both (one engine, one calibration for both modes), then small
#     at batch 1, 8, 64 with --cuda_kernels=fused (the unverified kernels; their device test
#     cuda_fused_kernels_test runs with the other tests/kernels/cuda binaries and under memcheck).
#   pass 2 (--pass=2, optional, <= 300 s): saturn-bench-engine 1b at batch 1..256 and small
#     at batch 128 and 256, each --graphs=both; then 1b with --cuda_kernels=fused, graphs on.
#   serve pass (--pass=serve, <= 300 s; needs a bundle made with bench/gpu_bundle.sh --serve):
#     saturn-server on the CUDA backend under saturn-load --compare cuda_graphs (small at
#     c=1,8,64, then 1b at c=1,64), each server's saturn-diag report (text and JSON) and info,
#     a recording of its last 3 s (saturn-diag record, gzipped), its top plan action at c=1
#     followed once (saturn-load --follow_plan: predicted vs measured), then small at c=64,
#     graphs on, with the overlapped loop off (--async_scheduling=off; auto runs it on CUDA) to
#     set beside the compare's graphs-on c=64 phase, all in serve-files.tar.gz,
#     with nvidia-smi sampled every 250 ms all along (smi.csv beside the results), so the
#     report's verdicts, the graphs prediction against the measured gain and the NVML figure
#     against nvidia-smi's can be read off one call.
#   --dry-run: prints the plan (stages, each one's time limit, the budget) and runs the
#     library search and the ldd check for real, here, on the bundle (or, without one, on
#     the binaries in build/). Runs nothing else.
#
# Writes gpu_check.json, gpu_check.log and gpu_check.txt (a short table) to $OUT, or to
# bench/results/ when OUT is unset.
#
#   device run: command "bench/gpu_check.sh", carry [".gpu_bundle"], timeout_s 330
#   (second call, only if the first passed: "bench/gpu_check.sh --pass=2", same carry)
#   (serve: "bench/gpu_check.sh --pass=serve", carry [".gpu_bundle"] of gpu_bundle.sh --serve)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${GPU_BUNDLE:-$ROOT/.gpu_bundle}
PASS=1
DRY_RUN=0
for arg in "$@"; do
  case $arg in
    --pass=1 | --pass=2 | --pass=serve) PASS=${arg#--pass=} ;;
    --dry-run) DRY_RUN=1 ;;
    -h | --help)
      sed -n '2,31p' "$0"
      exit 0
      ;;
    *)
      echo "gpu_check: unknown argument '$arg' (use --pass=1|2|serve, --dry-run)" >&2
      exit 2
      ;;
  esac
done
BUDGET_S=${GPU_CHECK_BUDGET_S:-290} # the device call's timeout_s is this plus ~40 s slack
if [ "$DRY_RUN" = 1 ]; then
  RESULTS=$(mktemp -d)
else
  RESULTS=${OUT:-$ROOT/bench/results}
fi
mkdir -p "$RESULTS"
LOG=$RESULTS/gpu_check.log
: >"$LOG"
START=$(date +%s)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; [ "$DRY_RUN" = 1 ] && rm -rf "$RESULTS"' EXIT
STAGES=$WORK/stages.tsv # name, rc, seconds, result file, limit
: >"$STAGES"
PLANNED=0

log() { echo "[gpu_check +$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# stage NAME TIMEOUT_S RESULT_FILE CMD...: runs under timeout (shortened to the time left).
# In a dry run it prints the stage and its limit instead.
stage() {
  local name=$1 limit=$2 result=$3
  shift 3
  [ "${IN_GROUP:-0}" = 1 ] || PLANNED=$((PLANNED + limit))
  if [ "$DRY_RUN" = 1 ]; then
    printf '  %-40s %4ss  %s\n' "${IN_GROUP:+  }$name" "$limit" "$(basename "$1") ${*:2}" | cut -c1-150
    return 0
  fi
  local remain
  remain=$(left)
  if [ "$remain" -lt 10 ]; then
    log "$name: skipped (budget spent)"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" skipped 0 "" "$limit" >>"$STAGES"
    return 0
  fi
  [ "$limit" -gt "$remain" ] && limit=$remain
  log "$name: start (timeout ${limit}s)"
  local t0
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  log "$name: rc=$rc in $(($(date +%s) - t0))s"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" "$result" "$limit" >>"$STAGES"
}

# --- the binaries ------------------------------------------------------------------------
if [ -f "$BUNDLE/bundle.tar.xz" ]; then
  if command -v xz >/dev/null; then
    tar -xJf "$BUNDLE/bundle.tar.xz" -C "$WORK" || { log "bundle: unpacking failed"; exit 2; }
  else  # no xz on the machine: python3's tarfile reads it (lzma is in its standard library)
    python3 -c 'import sys, tarfile
kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$BUNDLE/bundle.tar.xz" "$WORK" ||
      { log "bundle: unpacking with python3 failed"; exit 2; }
  fi
  log "bundle: $(head -n1 "$BUNDLE/MANIFEST.txt" 2>/dev/null)"
elif [ -f "$BUNDLE/bundle.tar.gz" ]; then  # one written before 2026-12-06
  tar -xzf "$BUNDLE/bundle.tar.gz" -C "$WORK" || { log "bundle: unpacking failed"; exit 2; }
  log "bundle: $(head -n1 "$BUNDLE/MANIFEST.txt" 2>/dev/null)"
elif [ "$DRY_RUN" = 1 ] && [ -d "$ROOT/build" ]; then
  mkdir -p "$WORK/bin" "$WORK/lib"
  for src in "$ROOT"/tests/kernels/cuda/*_test.cc; do
    f=$ROOT/build/tests/$(basename "$src" .cc)
    [ -x "$f" ] && ln -s "$f" "$WORK/bin/$(basename "$f")"
  done
  [ -x "$ROOT/build/bench/saturn-bench-engine" ] &&
    ln -s "$ROOT/build/bench/saturn-bench-engine" "$WORK/bin/saturn-bench-engine"
  for tool in server/saturn-server clients/saturn-load clients/saturn-diag; do
    [ -x "$ROOT/build/$tool" ] && ln -s "$ROOT/build/$tool" "$WORK/bin/$(basename "$tool")"
  done
  log "no $BUNDLE/bundle.tar.xz: dry run over the binaries in build/ instead"
else
  log "no $BUNDLE/bundle.tar.xz: run bench/gpu_bundle.sh first (and carry .gpu_bundle)"
  exit 2
fi
BIN=$WORK/bin

# --- cuBLAS/cuBLASLt 13 and the driver: from the machine, wherever they are ---------------
# The bundle leaves them out (cuBLASLt alone is ~500 MB). CUDA 13 may put them in the
# toolkit (lib64, targets/), in pip wheels (nvidia/cu13/lib; nvidia/cublas/lib is the cu12
# layout) or in the loader cache.
candidate_dirs() {
  local d
  for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 \
    /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
    /usr/local/cuda-13*/targets/x86_64-linux/lib; do
    echo "$d"
  done
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + sys.path)
try:
    import nvidia
    roots.update(os.path.dirname(p) for p in nvidia.__path__)
except Exception:
    pass
for r in sorted(x for x in roots if x and os.path.isdir(x)):
    for d in glob.glob(os.path.join(r, "nvidia", "cu13", "lib")) + \
             glob.glob(os.path.join(r, "nvidia", "*", "lib")):
        print(d)
PY
  done
  ldconfig -p 2>/dev/null | awk '/libcublas(Lt)?\.so/{print $NF}' | xargs -r -n1 dirname
}
CUDA_LIBS=""
while read -r d; do
  [ -d "$d" ] || continue
  ls "$d"/libcublas.so* "$d"/libcublasLt.so* >/dev/null 2>&1 || continue
  case ":$CUDA_LIBS:" in *":$d:"*) continue ;; esac
  CUDA_LIBS="$CUDA_LIBS:$d"
done < <(candidate_dirs | awk '!seen[$0]++')
export LD_LIBRARY_PATH="$WORK/lib$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log "cuBLAS found in: ${CUDA_LIBS#:}"

# --- stage 0: every binary loads (ldd), else stop with the missing libraries named -------
missing=""
for b in "$BIN"/*; do
  [ -e "$b" ] || continue
  nf=$(ldd "$b" 2>&1 | awk '/not found/{print $1}' | sort -u | tr '\n' ' ')
  [ -n "$nf" ] && missing="$missing  $(basename "$b"): $nf\n"
done
if [ -n "$missing" ]; then
  log "ldd: libraries not found, nothing can run:"
  printf "$missing" | tee -a "$LOG"
  log "searched: $(candidate_dirs | awk '!seen[$0]++' | tr '\n' ' ')"
  log "fix: point CUDA_HOME at a CUDA 13 toolkit, or install the nvidia-cublas 13 wheel"
  printf '%s\t%s\t%s\t%s\t%s\n' ldd 127 0 "" 10 >>"$STAGES"
  LDD_OK=0
else
  log "ldd: all $(ls "$BIN" | wc -l) binaries resolve every library"
  printf '%s\t%s\t%s\t%s\t%s\n' ldd 0 0 "" 10 >>"$STAGES"
  LDD_OK=1
fi

if [ "$DRY_RUN" = 1 ]; then
  echo "gpu_check --dry-run: pass $PASS, budget ${BUDGET_S}s (device call: timeout_s $((BUDGET_S + 40)))"
  echo "  ldd                                       $([ $LDD_OK = 1 ] && echo ok || echo FAILED)"
fi

# --- the stages of the pass ---------------------------------------------------------------
# A group of stages shares one allotment: each stage's limit is min(cap, what the group has
# left), so slow tests squeeze memcheck's share, never the bench's.
GROUP_LEFT=0
# group NAME SECONDS: starts a group of stages sharing SECONDS.
group() {
  GROUP_LEFT=$2
  PLANNED=$((PLANNED + $2))
  [ "$DRY_RUN" = 1 ] && printf '  %-40s %4ss  (shared; each stage below gets at most its cap)\n' "[$1]" "$2"
  return 0
}
group_stage() {
  local cap=$1 name=$2
  shift 2
  local limit=$cap
  [ "$DRY_RUN" = 0 ] && [ "$GROUP_LEFT" -lt "$limit" ] && limit=$GROUP_LEFT
  if [ "$limit" -lt 5 ]; then
    log "$name: skipped (its group's time is spent)"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" skipped 0 "" 0 >>"$STAGES"
    return 0
  fi
  local t0
  t0=$(date +%s)
  IN_GROUP=1 stage "$name" "$limit" "$@"
  GROUP_LEFT=$((GROUP_LEFT - ($(date +%s) - t0)))
}
# compute-sanitizer refuses some virtualised devices ("Device not supported", seen under
# gVisor): that is recorded as rc "unsupported", not as a memory error.
cat >"$WORK/memcheck.sh" <<'SH'
#!/usr/bin/env bash
out=$(mktemp)
compute-sanitizer --tool memcheck --error-exitcode 9 "$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ $rc -ne 0 ] && grep -q "Device not supported" "$out"; then rc=77; fi
rm -f "$out"
exit $rc
SH
chmod +x "$WORK/memcheck.sh"

run_pass1() {
  stage nvidia-smi 10 "" nvidia-smi \
    --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,utilization.gpu --format=csv
  local t n
  group tests 120
  for t in "$BIN"/*_test; do
    [ -e "$t" ] || continue
    n=$(basename "$t")
    group_stage 60 "test:$n" "$WORK/$n.json" "$t" --gtest_output="json:$WORK/$n.json"
  done
  group memcheck 60 # short, kernel-heavy filters: memcheck slows every launch many times
  if command -v compute-sanitizer >/dev/null 2>&1 || [ "$DRY_RUN" = 1 ]; then
    group_stage 30 memcheck:sampling "" "$WORK/memcheck.sh" "$BIN/cuda_sampling_test" \
      --gtest_filter='-*LmLike*'
    group_stage 30 memcheck:attention "" "$WORK/memcheck.sh" "$BIN/cuda_attention_test" \
      --gtest_filter='*ragged*:*decode_gqa_hd32*'
    group_stage 30 memcheck:capture "" "$WORK/memcheck.sh" "$BIN/cuda_capture_test" \
      --gtest_filter='-*StepEnd*'
    group_stage 30 memcheck:fused-kernels "" "$WORK/memcheck.sh" "$BIN/cuda_fused_kernels_test" \
      --gtest_filter='*b1_short*:*b2_group8*:*b3_mha*:*SkinnyGemmSplit*:*FusedRopeKvWrite*'
  else
    log "memcheck: compute-sanitizer not on PATH, skipped"
  fi
  stage bench:small 90 "$WORK/bench_small.json" "$BIN/saturn-bench-engine" --backend=cuda \
    --model=small --batches=1,2,4,8,16,32,64 --graphs=both --json="$WORK/bench_small.json"
  # The same with --cuda_kernels=fused (skinny GEMM with q/k/v in one launch and SwiGLU in its
  # epilogue, split-K decode attention, RoPE fused with the KV write, split greedy sampling),
  # beside the baseline set; each row's ops_per_step shows the launches a step saves.
  stage bench:small-fused 60 "$WORK/bench_small_fused.json" "$BIN/saturn-bench-engine" \
    --backend=cuda --model=small --batches=1,8,64 --graphs=both --cuda_kernels=fused \
    --json="$WORK/bench_small_fused.json"
}
run_pass2() {
  stage nvidia-smi 15 "" nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
  stage bench:1b 180 "$WORK/bench_1b.json" "$BIN/saturn-bench-engine" --backend=cuda \
    --model=1b --batches=1,8,32,64,128,256 --graphs=both --json="$WORK/bench_1b.json"
  stage bench:small-large-batch 90 "$WORK/bench_small_large.json" "$BIN/saturn-bench-engine" \
    --backend=cuda --model=small --batches=128,256 --graphs=both \
    --json="$WORK/bench_small_large.json"
  stage bench:1b-fused 90 "$WORK/bench_1b_fused.json" "$BIN/saturn-bench-engine" --backend=cuda \
    --model=1b --batches=1,8,64,256 --graphs=on --cuda_kernels=fused \
    --json="$WORK/bench_1b_fused.json"
}
# The serving half, as a user with a GPU runs it. One server per model; its stages share the
# server's lifetime (started and stopped around them, a failed start recorded as a stage).
SERVER_PID=""
SERVER_TARGET=""
start_server() { # NAME ARGS...: starts saturn-server, waits up to 120 s for SERVING
  local name=$1
  shift
  if [ "$DRY_RUN" = 1 ]; then
    printf '  %-40s %4ss  %s\n' "server:$name (start)" 120 "saturn-server --backend cuda $*"
    PLANNED=$((PLANNED + 20))
    return 0
  fi
  local log_file=$RESULTS/$name.server.log t0
  t0=$(date +%s)
  # GPU_CHECK_SERVE_BACKEND=cpu exercises the pass on a machine without a GPU.
  "$BIN/saturn-server" --listen 127.0.0.1:0 --backend "${GPU_CHECK_SERVE_BACKEND:-cuda}" "$@" \
    >"$log_file" 2>&1 &
  SERVER_PID=$!
  SERVER_TARGET=""
  for _ in $(seq 480); do
    grep -q "(SERVING)" "$log_file" && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    [ "$(left)" -lt 15 ] && break
    sleep 0.25
  done
  if grep -q "(SERVING)" "$log_file"; then
    SERVER_TARGET=$(grep -o 'listening on [^ ]*' "$log_file" | head -n1 | awk '{print $3}')
    log "server:$name serving at $SERVER_TARGET after $(($(date +%s) - t0))s"
    printf '%s\t%s\t%s\t%s\t%s\n' "server:$name" 0 "$(($(date +%s) - t0))" "" 120 >>"$STAGES"
  else
    log "server:$name did not start (see $name.server.log)"
    printf '%s\t%s\t%s\t%s\t%s\n' "server:$name" 1 "$(($(date +%s) - t0))" "" 120 >>"$STAGES"
    stop_server
  fi
}
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
serve_model() { # MODEL CONCURRENCY COMPARE_LIMIT_S
  local model=$1 conc=$2 limit=$3
  start_server "$model" --model "$model"
  [ -n "$SERVER_TARGET" ] || [ "$DRY_RUN" = 1 ] || return 0
  local t=${SERVER_TARGET:-HOST:PORT}
  stage "serve:$model-compare" "$limit" "$WORK/$model-compare.json" "$BIN/saturn-load" \
    --target "$t" --concurrency "$conc" --compare cuda_graphs --min_measure_s 6 \
    --input_len 64 --output_len 64 --progress=false --json "$WORK/$model-compare.json"
  stage "serve:$model-diag" 20 "$WORK/$model-diag.json" sh -c \
    "'$BIN/saturn-diag' get --target $t --window 8 > '$RESULTS/$model-diag.txt' &&
     '$BIN/saturn-diag' get --target $t --window 8 --json > '$WORK/$model-diag.json' &&
     '$BIN/saturn-diag' info --target $t > '$RESULTS/$model-info.txt'"
  # The last 3 s of the graphs-on phase, whole (steps, engine state, calibration): judged again
  # on any machine with saturn-diag analyze, and the H200 fixtures of tests/data/recordings/.
  stage "serve:$model-record" 20 "$WORK/$model-record.txt" sh -c \
    "'$BIN/saturn-diag' record --target $t --window 3 -o '$WORK/$model-recording.json' \
       > '$WORK/$model-record.txt' && gzip -c '$WORK/$model-recording.json' \
       > '$RESULTS/$model-recording.json.gz'"
  # The plan followed once at c=1 (graphs as the server started: off): the top action's
  # prediction, often "enable CUDA graphs", beside what the server then measured.
  stage "serve:$model-follow" 40 "$WORK/$model-follow-summary.json" sh -c \
    "'$BIN/saturn-load' --target $t --concurrency 1 --follow_plan --min_measure_s 4 \
       --input_len 64 --output_len 64 --progress=false --json '$WORK/$model-follow.json' \
       > '$RESULTS/$model-follow.txt' && python3 -c 'import json,sys; j=json.load(open(sys.argv[1]));
print(json.dumps([{\"label\": p[\"label\"], \"follow_note\": p[\"follow_note\"],
  \"followed_plan\": p[\"followed_plan\"]} for p in j[\"phases\"]]))' '$WORK/$model-follow.json' \
       > '$WORK/$model-follow-summary.json'"
  [ "$DRY_RUN" = 1 ] || cp "$WORK/$model-compare.json" "$RESULTS/" 2>/dev/null
  stop_server
}
# small at c=64, graphs on, with the plain step loop: the overlapped loop's gain is the
# compare's graphs-on c=64 tok/s over this one's.
serve_plain_loop() {
  start_server small-plain-loop --model small --cuda_graphs --async_scheduling=off
  [ -n "$SERVER_TARGET" ] || [ "$DRY_RUN" = 1 ] || return 0
  local t=${SERVER_TARGET:-HOST:PORT}
  stage "serve:small-plain-loop-c64" 40 "$WORK/small-plain-loop.json" "$BIN/saturn-load" \
    --target "$t" --concurrency 64 --min_measure_s 6 --input_len 64 --output_len 64 \
    --progress=false --json "$WORK/small-plain-loop.json"
  [ "$DRY_RUN" = 1 ] || cp "$WORK/small-plain-loop.json" "$RESULTS/" 2>/dev/null
  stop_server
}
run_serve() {
  local tool
  for tool in saturn-server saturn-load saturn-diag; do
    if [ ! -e "$BIN/$tool" ]; then
      log "serve: $tool is not in the bundle (make it with bench/gpu_bundle.sh --serve)"
      printf '%s\t%s\t%s\t%s\t%s\n' "serve:bundle" 2 0 "" 0 >>"$STAGES"
      return 0
    fi
  done
  local smi=""
  if [ "$DRY_RUN" = 0 ] && command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,power.draw,memory.used \
      --format=csv -lms 250 >"$RESULTS/smi.csv" 2>&1 &
    smi=$!
  fi
  serve_model small 1,8,64 130
  serve_model 1b 1,64 100
  serve_plain_loop
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  # At most 8 files come back from a device call: everything but gpu_check.* in one archive.
  if [ "$DRY_RUN" = 0 ]; then
    (cd "$RESULTS" && files=$(ls | grep -v '^gpu_check\.') && [ -n "$files" ] &&
      tar -czf serve-files.tar.gz $files && rm -f $files)
  fi
  return 0
}
if [ "$LDD_OK" = 1 ] || [ "$DRY_RUN" = 1 ]; then
  case $PASS in
    1) run_pass1 ;;
    2) run_pass2 ;;
    serve) run_serve ;;
  esac
fi

if [ "$DRY_RUN" = 1 ]; then
  echo "  stage limits add up to ${PLANNED}s; each is cut to what is left of ${BUDGET_S}s"
  [ "$PLANNED" -le $((BUDGET_S + 60)) ] || echo "  WARNING: limits exceed the budget by more than 60s"
  [ "$LDD_OK" = 1 ] || exit 3
  exit 0
fi

python3 - "$STAGES" "$RESULTS" "$PASS" "$BUDGET_S" <<'PY'
import json, os, sys
stages_file, results, pass_no, budget = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
report = {"pass": int(pass_no) if pass_no.isdigit() else pass_no, "budget_s": int(budget),
          "stages": []}
for line in open(stages_file):
    name, rc, secs, result, limit = (line.rstrip("\n").split("\t") + [""] * 5)[:5]
    if name.startswith("memcheck:") and rc == "77":
        rc = "unsupported"  # compute-sanitizer refused this device (memcheck.sh)
    entry = {"name": name, "rc": rc, "seconds": int(secs or 0), "limit_s": int(limit or 0)}
    if result and os.path.exists(result):
        try:
            data = json.load(open(result))
        except ValueError:
            data = None
        if name.startswith("test:") and data:
            cases = [t for s in data.get("testsuites", []) for t in s.get("testsuite", [])]
            entry["tests"] = len(cases)
            entry["failed"] = [c["classname"] + "." + c["name"] for c in cases if c.get("failures")]
            entry["skipped"] = sum(1 for c in cases if c.get("result") == "SKIPPED")
        elif data is not None:
            entry["result"] = data
    report["stages"].append(entry)
report["ok"] = all(s["rc"] in ("0", "skipped", "unsupported") for s in report["stages"])
json.dump(report, open(os.path.join(results, "gpu_check.json"), "w"), indent=1)
rows = ["%-34s %8s %6s  %s" % ("stage", "rc", "sec", "detail")]
for s in report["stages"]:
    detail = ""
    if "tests" in s:
        detail = "%d tests, %d failed, %d skipped" % (s["tests"], len(s["failed"]), s["skipped"])
        if s["failed"]:
            detail += ": " + ", ".join(s["failed"][:4])
    elif isinstance(s.get("result"), dict):
        detail = ", ".join("%s=%s" % (k, v) for k, v in list(s["result"].items())[:4]
                           if not isinstance(v, (list, dict)))[:90]
    rows.append("%-34s %8s %6d  %s" % (s["name"], s["rc"], s["seconds"], detail))
    # Engine bench stages: a line per decode row, so the baseline and fused kernel sets
    # (tokens/s, ops a step) compare.
    for r in (s["result"].get("rows", []) if isinstance(s.get("result"), dict) else []):
        if isinstance(r, dict) and "tokens_per_s" in r:
            rows.append("    batch %-4s graphs %-3s %10.1f tok/s %6.1f ms %5.0f ops/step %5.1f %% of read bound"
                        % (r.get("batch"), "on" if r.get("graphs") else "off", r["tokens_per_s"],
                           r.get("step_ms", 0), r.get("ops_per_step", 0),
                           100 * r.get("read_bound_share", 0)))
rows.append("overall: " + ("OK" if report["ok"] else "FAILURES"))
text = "\n".join(rows)
open(os.path.join(results, "gpu_check.txt"), "w").write(text + "\n")
print(text)
PY
[ "$LDD_OK" = 1 ] || exit 3
