#!/usr/bin/env bash
# The README's main job, shortened for CI: the built binaries, the small model on the CPU
# backend, a two-point sweep with few requests. Fails if any step fails or an output file is
# missing or malformed.
#   bash tests/e2e/demo.sh BUILD_DIR
set -euo pipefail
build="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
SATURN_SKIP_BUILD=1 SATURN_BUILD="$build" SATURN_OUT="$out" SATURN_BACKEND=cpu \
  SATURN_SWEEP=1,4 SATURN_REQUESTS=6 SATURN_MIN_MEASURE_S=3 bash "$root/clients/demo.sh"
for f in load.txt load.json load.csv diagnosis.json roofline.svg trace.json calibration.json; do
  [ -s "$out/$f" ] || { echo "e2e: $f was not written" >&2; exit 1; }
done
grep -q '"bottleneck"' "$out/diagnosis.json" || { echo "e2e: diagnosis has no bottleneck" >&2; exit 1; }
grep -q '<svg' "$out/roofline.svg" || { echo "e2e: roofline.svg is not SVG" >&2; exit 1; }
grep -q 'traceEvents' "$out/trace.json" || { echo "e2e: trace.json has no traceEvents" >&2; exit 1; }
# The demo ends with the verdict in plain words, and no stability rate is impossible.
for w in "Verdict: at c=4" "Why: " "What to change: "; do
  grep -q "$w" "$out/load.txt" || { echo "e2e: load.txt has no \"$w\"" >&2; exit 1; }
done
echo "e2e demo: ok"
