#!/usr/bin/env bash
# One command for the GPU machine: unpacks .gpu_bundle/ (made here by bench/gpu_bundle.sh),
# then nvidia-smi, the CUDA tests, compute-sanitizer memcheck over a short test, and the
# engine bench (small and 1b, batch 1..256, graphs off and on). Writes gpu_check.json,
# gpu_check.log and gpu_check.txt (a short table) to $OUT, or to bench/results/ when OUT is
# unset. Every stage has its own timeout and the whole run stays under 8 minutes; a failing
# stage is recorded and the next one runs.
#
#   device run:  bench/gpu_check.sh          (carry [".gpu_bundle"], timeout_s 540)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${GPU_BUNDLE:-$ROOT/.gpu_bundle}
RESULTS=${OUT:-$ROOT/bench/results}
BUDGET_S=${GPU_CHECK_BUDGET_S:-470}
mkdir -p "$RESULTS"
LOG=$RESULTS/gpu_check.log
: >"$LOG"
START=$(date +%s)
WORK=$(mktemp -d)
STAGES=$WORK/stages.tsv  # name, rc, seconds, result file
: >"$STAGES"

log() { echo "[gpu_check +$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# stage NAME TIMEOUT_S RESULT_FILE CMD...: runs under timeout (shortened to the time left).
stage() {
  local name=$1 limit=$2 result=$3
  shift 3
  local remain
  remain=$(left)
  if [ "$remain" -lt 10 ]; then
    log "$name: skipped (budget spent)"
    printf '%s\t%s\t%s\t%s\n' "$name" skipped 0 "" >>"$STAGES"
    return 0
  fi
  [ "$limit" -gt "$remain" ] && limit=$remain
  log "$name: start (timeout ${limit}s)"
  local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  log "$name: rc=$rc in $(($(date +%s) - t0))s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" "$result" >>"$STAGES"
}

if [ ! -f "$BUNDLE/bundle.tar.gz" ]; then
  log "no $BUNDLE/bundle.tar.gz: run bench/gpu_bundle.sh first (and carry .gpu_bundle)"
  exit 2
fi
tar -xzf "$BUNDLE/bundle.tar.gz" -C "$WORK"
# cuBLAS 13 and the driver come from the machine: its CUDA install or the pip wheels.
CUDA_LIBS=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
  [ -d "$d" ] && CUDA_LIBS="$CUDA_LIBS:$d"
done
export LD_LIBRARY_PATH="$WORK/lib$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log "bundle: $(cat "$BUNDLE/MANIFEST.txt" 2>/dev/null | head -n1)"

stage nvidia-smi 20 "" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,utilization.gpu --format=csv

for t in "$WORK"/bin/*_test; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  stage "test:$n" 90 "$WORK/$n.json" "$t" --gtest_output="json:$WORK/$n.json"
done

if command -v compute-sanitizer >/dev/null 2>&1 && [ -x "$WORK/bin/cuda_attention_test" ]; then
  stage memcheck 90 "" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$WORK/bin/cuda_attention_test" --gtest_filter='*ragged*:*decode_gqa_hd32*'
else
  log "memcheck: compute-sanitizer or cuda_attention_test missing, skipped"
fi

if [ -x "$WORK/bin/saturn-bench-engine" ]; then
  for model in small 1b; do
    for graphs in off on; do
      stage "bench:$model:graphs=$graphs" 75 "$WORK/bench_${model}_$graphs.json" \
        "$WORK/bin/saturn-bench-engine" --backend=cuda --model=$model \
        --batches=1,2,4,8,16,32,64,128,256 --graphs=$graphs --json="$WORK/bench_${model}_$graphs.json"
    done
  done
else
  log "bench: saturn-bench-engine not in the bundle, skipped"
fi

python3 - "$STAGES" "$RESULTS" <<'PY'
import json, os, sys
stages_file, results = sys.argv[1], sys.argv[2]
report = {"stages": []}
for line in open(stages_file):
    name, rc, secs, result = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
    entry = {"name": name, "rc": rc, "seconds": int(secs or 0)}
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
report["ok"] = all(s["rc"] in ("0", "skipped") for s in report["stages"])
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
rows.append("overall: " + ("OK" if report["ok"] else "FAILURES"))
text = "\n".join(rows)
open(os.path.join(results, "gpu_check.txt"), "w").write(text + "\n")
print(text)
PY
rm -rf "$WORK"
