#!/usr/bin/env bash
# First contact: `--help` in every Saturn binary lists Saturn's own flags (one known flag per
# binary is checked) and exits 0; Abseil's flags stay behind --helpfull. A stray argument
# (e.g. the "false" of "--flag false", which set the flag to true) exits 2 naming it.
#   bash tests/e2e/help.sh BUILD_DIR
set -uo pipefail
build="$1"
fail=0
check() {  # binary, a flag its --help must list
  local bin="$build/$1" flag="$2" out rc
  if [ ! -x "$bin" ]; then
    echo "help: $bin is not built" >&2
    fail=1
    return
  fi
  out="$("$bin" --help 2>&1)"
  rc=$?
  if [ "$rc" -ne 0 ]; then echo "help: $1 --help exited $rc" >&2; fail=1; fi
  if ! grep -q -- "--$flag " <<<"$out"; then
    echo "help: $1 --help does not list --$flag:" >&2
    echo "$out" >&2
    fail=1
  fi
  if grep -q -- "--flagfile" <<<"$out"; then
    echo "help: $1 --help lists Abseil's --flagfile" >&2
    fail=1
  fi
}
check server/saturn-server kv_cache_mb
check clients/saturn-load concurrency
check clients/saturn-diag target
check clients/saturn-load tls_ca  # the security flags shared by both tools
check clients/saturn-load prefix_len
check clients/saturn-diag auth_token_file
check bench/saturn-bench-engine json
check bench/saturn-bench-gemm json
check bench/saturn-bench-instrumentation json
check bench/saturn-bench-plan start_seqs
check bench/saturn-bench-host batches
check bench/saturn-soak clients
# (saturn-diag's positional arguments are its commands.)
for bin in server/saturn-server clients/saturn-load bench/saturn-bench-engine \
  bench/saturn-bench-gemm bench/saturn-bench-host bench/saturn-bench-instrumentation \
  bench/saturn-bench-plan bench/saturn-soak; do
  out="$(timeout 60 "$build/$bin" stray-argument 2>&1)"
  rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q 'unexpected argument "stray-argument"' <<<"$out"; then
    echo "help: $bin stray-argument exited $rc:" >&2
    echo "$out" | tail -3 >&2
    fail=1
  fi
done
# --kv_cache_mb's help states the automatic size the engine uses (engine.h: 1/8 of device
# memory).
if ! "$build/server/saturn-server" --help | grep -A1 -- "--kv_cache_mb" | grep -q "1/8 of device"; then
  echo "help: --kv_cache_mb's help does not say 1/8 of device memory" >&2
  fail=1
fi
grep -q "device_memory_bytes() / 8" "$(dirname "$0")/../../engine/engine.cc" ||
  { echo "help: engine.cc no longer caps the KV cache at 1/8: update --kv_cache_mb's help" >&2; fail=1; }
[ "$fail" -eq 0 ] && echo "e2e help: ok"
exit "$fail"
