#!/usr/bin/env bash
# Installs the Debian 12 packages Saturn builds against, skipping those already present.
# Used by the README's two commands (clients/demo.sh, tests/run_all.sh) and so by CI.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libabsl-dev libopenblas-dev nlohmann-json3-dev libcpp-httplib-dev
      libgtest-dev libgmock-dev libicu-dev python3-venv
      libopenmpi-dev openmpi-bin  # tensor-parallel ranks and their launcher (mpirun)
      clang libclang-rt-14-dev)  # the sanitizer and libFuzzer job (tests/sanitize.sh)
pkgs+=("$@")  # extras a caller asks for (tests/run_all.sh: prometheus)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "saturn: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
