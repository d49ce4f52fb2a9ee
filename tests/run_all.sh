#!/usr/bin/env bash
# Saturn's whole test suite on a fresh Debian 12 machine: install what is missing, build
# (the CUDA backend too where nvcc exists; its tests skip without a GPU), run CTest, then the
# sanitizer and fuzzing job (tests/sanitize.sh), then the ThreadSanitizer job
# (tests/sanitize_thread.sh).
#   bash tests/run_all.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
bash "$root/.ci/deps.sh"
# Test-only, best effort: a real Prometheus (about 19 MB) for tests/server/prometheus_e2e_test.cc,
# which skips with a message where it is missing.
bash "$root/.ci/deps.sh" prometheus || echo "saturn: prometheus not installed; its test will skip"
# Test-only: the balancer of tests/e2e/fleet_nginx.sh (Debian's nginx has the gRPC module) and
# curl for the HTTP API's wire checks. In CI their tests fail without them; elsewhere they skip.
bash "$root/.ci/deps.sh" nginx curl || [ "${CI:-}" != "true" ] ||
  { echo "saturn: cannot install nginx and curl" >&2; exit 1; }
jobs="$(nproc)"
# Hugging Face `tokenizers`, the reference the tokenizer.json reader's test compares against,
# llama.cpp's `gguf` package (with numpy), the reference for gguf_test's dequantization, and
# jinja2, the reference chat_template_test renders with (as transformers does); without network
# access those tests skip and say so.
if [ ! -x "$build/pyenv/bin/python3" ] ||
   ! "$build/pyenv/bin/python3" -c "import tokenizers, gguf, numpy, jinja2" 2>/dev/null; then
  { python3 -m venv "$build/pyenv" &&
    "$build/pyenv/bin/pip" install -q tokenizers gguf numpy jinja2; } ||
    echo "saturn: could not install Python tokenizers, gguf and jinja2; their comparisons will skip"
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 900
bash "$root/tests/sanitize.sh" "${build}-asan"
bash "$root/tests/sanitize_thread.sh" "${build}-tsan"
