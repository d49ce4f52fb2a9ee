#!/usr/bin/env bash
# The sanitizer and fuzzing job of CI (docs/HARDENING.md), run by tests/run_all.sh after the
# normal suite: one clang build (CUDA off) with AddressSanitizer + UndefinedBehaviorSanitizer
# and libFuzzer coverage, then
#   - the ground floor, engine, server and client tests (CTest labels base, engine, server,
#     clients; the e2e and kernel tests are left to the normal build, which runs them all),
#   - a short libFuzzer run of every fuzz target (label fuzz; SATURN_FUZZ_RUNS mutants each).
# Any sanitizer report fails the test that triggered it. SATURN_SKIP_SANITIZERS=1 skips the job;
# SATURN_SANITIZER_LABELS (a CTest label regex) narrows it when CI time is short.
#   bash tests/sanitize.sh [build-dir]
set -euo pipefail
# shellcheck source=tests/sanitizer_job.sh
source "$(dirname "${BASH_SOURCE[0]}")/sanitizer_job.sh"
sanitizer_job_start "sanitizer job"
build="${1:-$root/build-asan}"
sanitizer_build "$build" -DSATURN_SANITIZE=address,undefined -DSATURN_FUZZ=ON -- \
  saturn_sanitizer_tests saturn_fuzz_targets
# Leaks are reported (and fail) at exit; third-party ones are listed in the suppressions.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_init_order=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizer_suppressions.txt:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900 \
  -L "${SATURN_SANITIZER_LABELS:-^(base|engine|server|clients|fuzz)\$}"
echo "saturn: sanitizer job: build $((built - start)) s, tests $(($(date +%s) - built)) s"
