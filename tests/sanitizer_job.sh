#!/usr/bin/env bash
# What the two sanitizer jobs (tests/sanitize.sh, tests/sanitize_thread.sh) share, sourced by
# both after `set -euo pipefail`: the skip switch, and one clang build (CUDA off, -O1, line
# tables or, where the job sets sanitizer_debug, that) of the targets a job runs.
#   sanitizer_job_start NAME      prints "saturn: NAME skipped" and exits 0 when
#                                 SATURN_SKIP_SANITIZERS=1; else sets root, jobs and start
#   sanitizer_build DIR FLAG... -- TARGET...
#                                 configures DIR with the FLAGs, builds the TARGETs, sets built
# Not run on its own. start and built are read by the job scripts (their timing line).
# shellcheck disable=SC2034

sanitizer_job_start() {
  if [ "${SATURN_SKIP_SANITIZERS:-0}" = "1" ]; then
    echo "saturn: $1 skipped (SATURN_SKIP_SANITIZERS=1)"
    exit 0
  fi
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  jobs="$(nproc)"
  start=$(date +%s)
}

sanitizer_build() {
  local dir="$1" flags=()
  shift
  while [ "$1" != "--" ]; do
    flags+=("$1")
    shift
  done
  shift
  # -O1, as the sanitizers' own docs suggest, about 15 % less compile time than
  # RelWithDebInfo's -O2. Debug info: line tables only (file and line in every report) unless
  # the job sets sanitizer_debug; the ThreadSanitizer job's suppressions match qualified
  # function names, which inlined frames only carry with full -g.
  local opt="-O1 ${sanitizer_debug:--gline-tables-only} -DNDEBUG"
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSATURN_WITH_CUDA=OFF \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt" "${flags[@]}"
  cmake --build "$dir" -j"$jobs" --target "$@"
  built=$(date +%s)
}
