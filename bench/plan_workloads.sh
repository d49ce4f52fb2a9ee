#!/usr/bin/env bash
# saturn-bench-plan (./build/bench, --model=small) once per workload "PROMPT OUTPUT START_SEQS
# CLIENTS" (--prompt_len, --max_tokens, --start_seqs, --concurrency), run from the repository
# root: workload N (from 1) writes OUT/plan_N.json and OUT/plan_N.txt, and one line says it
# with the lines of its output that PATTERN (grep -E) matches. First the machine: uptime, its
# CPU count and model. The dated bench/results/*-diag-plans.sh scripts run through this.
#   bench/plan_workloads.sh [--loadavg] OUT PATTERN WORKLOAD... [-- SATURN-BENCH-PLAN FLAGS]
# --loadavg: the load average before and after each workload, too. OUT is relative to the
# repository root.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
loadavg=0
if [[ "${1:-}" == --loadavg ]]; then loadavg=1; shift; fi
[[ $# -ge 3 ]] || { sed -n '2,10p' "$0" >&2; exit 2; }
out="$1" pattern="$2"
shift 2
workloads=()
while [[ $# -gt 0 && "$1" != -- ]]; do workloads+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
flags=("$@")
mkdir -p "$out"; uptime; lscpu | grep -E "^CPU\(s\)|Model name"
i=0
for w in "${workloads[@]}"; do
  set -- $w; i=$((i+1))
  after=""
  if ((loadavg)); then
    echo "== w$i load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  fi
  ./build/bench/saturn-bench-plan --model=small --prompt_len=$1 --max_tokens=$2 --start_seqs=$3 \
    --concurrency=$4 "${flags[@]}" --json="$out/plan_$i.json" > "$out/plan_$i.txt" 2>&1
  if ((loadavg)); then after=" load after: $(cut -d' ' -f1-3 /proc/loadavg)"; fi
  echo "== w$i prompt $1 output $2 start_seqs $3 clients $4: $(grep -E "$pattern" "$out/plan_$i.txt" | tr '\n' ' ')$after"
done
