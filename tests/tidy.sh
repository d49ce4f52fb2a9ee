#!/usr/bin/env bash
# clang-tidy (the checks in .clang-tidy) over Saturn's C++ sources, using the compile
# commands CMake writes into the build folder (CMAKE_EXPORT_COMPILE_COMMANDS is on in
# CMakeLists.txt). Prints one progress line per file and every finding; exits 1 if any file
# has a finding (WarningsAsErrors), 2 if the build folder has no compile_commands.json.
#   bash tests/tidy.sh [file.cc | folder ...]     # default: every tracked .cc file
# SATURN_BUILD_DIR (default build) picks the build folder, SATURN_TIDY_JOBS (default nproc)
# how many files run at once, CLANG_TIDY (default clang-tidy) the binary.
# .cu files are left out (nvcc compiles them; clang-tidy cannot read their commands), and so
# is any .cc file the build does not compile (CUDA sources in a CPU-only build), with a note.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SATURN_BUILD_DIR:-$root/build}"
tidy="${CLANG_TIDY:-clang-tidy}"
jobs="${SATURN_TIDY_JOBS:-$(nproc)}"
db="$build/compile_commands.json"
if [ ! -f "$db" ]; then
  echo "tidy: no $db; configure first: cmake -S $root -B $build" >&2
  exit 2
fi
cd "$root"
files=()
if [ $# -eq 0 ]; then
  mapfile -t files < <(git ls-files '*.cc')
else
  for arg in "$@"; do
    if [ -d "$arg" ]; then
      mapfile -t -O "${#files[@]}" files < <(git ls-files "${arg%/}/*.cc")
    else
      files+=("$arg")
    fi
  done
fi
# Keep the files the build compiles (their absolute paths appear in the database).
queue=()
for f in "${files[@]}"; do
  if [[ "$f" != *.cc ]]; then
    echo "tidy: skipped $f (only .cc files are checked)"
    continue
  fi
  abs="$(realpath "$f")"
  if grep -qF "\"file\": \"$abs\"" "$db"; then
    queue+=("$abs")
  else
    echo "tidy: skipped $f (not compiled in $build)"
  fi
done
n=${#queue[@]}
if [ "$n" -eq 0 ]; then
  echo "tidy: no files to check"
  exit 0
fi
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
start=$(date +%s)
echo "tidy: $n files, $jobs at a time"
export tidy build logs n start
# One file: run clang-tidy, keep its output, print a progress line (and the findings).
check_one() {
  local i="$1" f="$2" out
  out="$logs/$i.log"
  if "$tidy" -p "$build" --quiet "$f" >"$out" 2>&1; then
    echo "tidy: [$i/$n] ok    ${f#"$PWD"/} ($(($(date +%s) - start)) s)"
  else
    touch "$logs/$i.failed"
    echo "tidy: [$i/$n] FAIL  ${f#"$PWD"/}"
    grep -v "warnings generated\|Suppressed .* warnings\|Use -header-filter\|Use -system-headers" \
      "$out" || true
  fi
}
export -f check_one
for i in "${!queue[@]}"; do printf '%s\0%s\0' "$((i + 1))" "${queue[$i]}"; done |
  xargs -0 -n 2 -P "$jobs" bash -c 'check_one "$1" "$2"' _
failed=$(find "$logs" -name '*.failed' | wc -l)
echo "tidy: $n files in $(($(date +%s) - start)) s, $failed with findings"
[ "$failed" -eq 0 ]
