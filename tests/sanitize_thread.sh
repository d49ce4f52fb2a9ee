#!/usr/bin/env bash
# The ThreadSanitizer job of CI (docs/HARDENING.md), run by tests/run_all.sh after the
# ASan+UBSan job: one clang build (CUDA off, -DSATURN_SANITIZE=thread) of only the threaded
# tests, run with halt_on_error so any data race or lock-order inversion fails the job:
#   engine_test              the engine loop thread vs. submit/cancel/stats callers, and the
#                            CPU backend's kernel thread pool under real steps
#   bounded_worker_test      UpdateEngineOptions' one worker thread and its queue
#   cpu_gemm_test            the GEMM/GEMV kernels split over the kernel thread pool
#   timer_thread_test        the diagnostics service's timer thread (reports, Watch pacing)
#   cancel_test              Generate streams cancelled mid-flight (reactor vs. engine thread)
#   lifecycle_test           start, serve and shut down with streams in flight
#   diagnostics_service_test diagnostics read while the engine writes them, Watch streams
#   signal_test              real saturn-server processes signalled (watcher thread, drain)
#   elastic_task_queue_test  the HTTP worker pool growing, shrinking and shutting down
# SATURN_TSAN_TESTS="a_test b_test" runs another list of test targets instead.
# gRPC, protobuf, abseil and OpenBLAS come uninstrumented from Debian; what TSan cannot see
# inside them is listed (with the reason) in tests/tsan_suppressions.txt, and the one gRPC
# guarantee Saturn's reactors rely on is annotated in server/grpc/grpc_handoff.h. Saturn's own code
# has no suppression entry. SATURN_SKIP_SANITIZERS=1 skips the job.
#   bash tests/sanitize_thread.sh [build-dir]
set -euo pipefail
# shellcheck source=tests/sanitizer_job.sh
source "$(dirname "${BASH_SOURCE[0]}")/sanitizer_job.sh"
sanitizer_job_start "thread sanitizer job"
build="${1:-$root/build-tsan}"
default_tests="engine_test bounded_worker_test cpu_gemm_test cpu_thread_pool_test timer_thread_test cancel_test"
default_tests+=" lifecycle_test diagnostics_service_test signal_test elastic_task_queue_test"
read -r -a tests <<<"${SATURN_TSAN_TESTS:-$default_tests}"
targets=("${tests[@]}")
# signal_test starts real saturn-server processes.
for t in "${tests[@]}"; do [ "$t" = signal_test ] && targets+=(saturn-server); done
# tests/tsan_suppressions.txt names gRPC's functions qualified: full debug info keeps those
# names on inlined frames (line tables alone give "Set", "Run").
sanitizer_debug=-g
sanitizer_build "$build" -DSATURN_SANITIZE=thread -- "${targets[@]}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$root/tests/tsan_suppressions.txt"
# TSan's shadow memory needs a fixed layout: on kernels with high mmap randomisation
# (vm.mmap_rnd_bits > 28) it dies at start with "unexpected memory mapping"; run without ASLR.
run=()
if ! "$build/tests/${tests[0]}" --gtest_list_tests >/dev/null 2>&1; then
  run=(setarch "$(uname -m)" -R)
fi
failed=()
for t in "${tests[@]}"; do
  echo "saturn: tsan: $t"
  if ! "${run[@]}" "$build/tests/$t" --gtest_brief=1; then
    failed+=("$t")
  fi
done
echo "saturn: thread sanitizer job: build $((built - start)) s, tests $(($(date +%s) - built)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "saturn: thread sanitizer job FAILED: ${failed[*]}" >&2
  exit 1
fi
