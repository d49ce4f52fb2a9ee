#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what bench/gpu_check.sh runs on the GPU machine: the
# CUDA test binaries and saturn-bench-engine (SATURN_ENGINE_ONLY, sm_90), plus the non-system
# shared libraries they load (Abseil, OpenBLAS, gfortran, GTest, ...; not libc/libstdc++ and
# not the CUDA driver or cuBLAS, which the GPU machine has), packed into .gpu_bundle/
# (git-ignored; carried to the device with carry [".gpu_bundle"]). cuBLAS/cuBLASLt are left
# out on purpose (cuBLASLt alone is ~500 MB, over the carry limit): gpu_check.sh finds them
# on the GPU machine and its first stage stops, naming them, if any binary cannot load.
#
#   bench/gpu_bundle.sh            # BUILD_DIR=build-gpu JOBS=2 by default
#   bench/gpu_bundle.sh --serve    # also saturn-server, saturn-load and saturn-diag from a full
#                                  # sm_90 build (SERVE_BUILD_DIR=build-gpu-serve), with the
#                                  # gRPC and protobuf libraries they load, for gpu_check.sh
#                                  # --pass=serve (27 MB packed on 2026-12-06)
set -euo pipefail
SERVE=0
for arg in "$@"; do
  case $arg in
    --serve) SERVE=1 ;;
    *)
      echo "gpu_bundle: unknown argument '$arg' (use --serve)" >&2
      exit 2
      ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-2}
DEST=$ROOT/.gpu_bundle

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$ROOT" -B "$BUILD" -DSATURN_ENGINE_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${launcher[@]}" >/dev/null

targets=()
for src in "$ROOT"/tests/kernels/cuda/*_test.cc; do
  [ -e "$src" ] && targets+=("$(basename "$src" .cc)")
done
[ -e "$ROOT/bench/engine_bench.cc" ] && targets+=(saturn-bench-engine)
echo "gpu_bundle: building ${targets[*]}"
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"
serve_bins=()
if [ "$SERVE" = 1 ]; then
  SERVE_BUILD=${SERVE_BUILD_DIR:-$ROOT/build-gpu-serve}
  cmake -S "$ROOT" -B "$SERVE_BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    "${launcher[@]}" >/dev/null
  echo "gpu_bundle: building saturn-server saturn-load saturn-diag (full build, sm_90)"
  cmake --build "$SERVE_BUILD" -j"$JOBS" --target saturn-server saturn-load saturn-diag
  serve_bins=("$SERVE_BUILD/server/saturn-server" "$SERVE_BUILD/clients/saturn-load"
              "$SERVE_BUILD/clients/saturn-diag")
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  bin=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -n1)
  if [ -z "$bin" ]; then echo "gpu_bundle: $t was not built" >&2; exit 1; fi
  cp "$bin" "$stage/bin/"
  strip --strip-debug "$stage/bin/$t"  # host debug info only; device code keeps -lineinfo
done
for bin in "${serve_bins[@]}"; do
  cp "$bin" "$stage/bin/"
  strip --strip-debug "$stage/bin/$(basename "$bin")"
done

# Shared libraries: everything ldd resolves except the C/C++ runtime and CUDA itself.
system_re='/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnvidia[^/]*)\.so'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  if echo "$lib" | grep -Eq "$system_re"; then continue; fi
  cp -L "$lib" "$stage/lib/$(basename "$lib")"
done
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true

rm -rf "$DEST"
mkdir -p "$DEST"
# xz, not gzip: each CUDA binary carries the same ~10 MB kernel image (.nv_fatbin), which xz's
# 64 MiB window finds again and gzip's 32 KiB window cannot (2026-12-06, --serve: 71 MB as
# .tar.gz, over the 64 MiB carry with the tree beside it; 27 MB as .tar.xz). One thread, so one
# block holds every binary. gpu_check.sh unpacks it with xz, or with python3's tarfile where the
# GPU machine has no xz.
tar -C "$stage" -cf - bin lib | xz -9 -T1 >"$DEST/bundle.tar.xz"
{
  echo "built $(date -u +%FT%TZ) from $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'uncommitted tree')"
  # What gpu_check.sh must find on the GPU machine (its ldd stage checks every binary).
  echo "needs from the machine: $(for b in "$stage"/bin/*; do ldd "$b"; done |
    awk '{print $1}' | grep -E '^lib(cuda|cudart|cublas|cublasLt|nvidia)' | sort -u | tr '\n' ' ')"
  (cd "$stage" && ls -l bin lib)
} >"$DEST/MANIFEST.txt"
du -sh "$DEST"
# What travels with `carry [".gpu_bundle"]`: the bundle plus the tree (tracked files and
# untracked ones git does not ignore), 64 MiB at most.
tree_bytes=$(git -C "$ROOT" ls-files -z --cached --others --exclude-standard |
  (cd "$ROOT" && du -cb --files0-from=- 2>/dev/null || true) | tail -n1 | cut -f1)
bundle_bytes=$(du -sb "$DEST" | cut -f1)
total=$((bundle_bytes + ${tree_bytes:-0}))
echo "gpu_bundle: bundle $((bundle_bytes / 1048576)) MiB + tree $((${tree_bytes:-0} / 1048576)) MiB = $((total / 1048576)) MiB of the 64 MiB carry"
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "gpu_bundle: over the device's 64 MiB carry: build without --serve, or leave test binaries out" >&2
  exit 1
fi
echo "gpu_bundle: wrote $DEST (run: bench/gpu_check.sh on the GPU machine, carry [\".gpu_bundle\"])"
