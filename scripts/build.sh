#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), configures once and builds into
# ${STRAIT_BUILD_DIR:-build}: every target, or only the targets named (scripts/train.sh builds
# just `strait`). `--tests` (first argument) installs the tests' packages too. The compiler's
# output goes to build.log in the build folder and is shown only when the build fails, so the main
# job's output stays readable. With ccache installed, compilations are cached (CCACHE_BASEDIR is
# the checkout, so clones at other paths share the cache).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
setup_args=()
if [ "${1:-}" = "--tests" ]; then
  setup_args=(--tests)
  shift
fi
"$root/scripts/setup.sh" "${setup_args[@]}"
targets=()
for t in "$@"; do targets+=(--target "$t"); done
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$root
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$build"
log="$build/build.log"
# The tests' tools may have come since the build folder was configured for the main job alone
# (clang enables the fuzz targets, doxygen the docs_api test): configure again when the cache
# recorded one as missing.
if [ ! -f "$build/build.ninja" ] || { [ ${#setup_args[@]} -gt 0 ] &&
  grep -qE '^STRAIT_(CLANGXX|DOXYGEN):FILEPATH=.*NOTFOUND' "$build/CMakeCache.txt"; }; then
  [ -f "$build/build.ninja" ] || echo "strait: configuring and building in $build" >&2
  if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${STRAIT_CMAKE_ARGS:-} >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
fi
start=$(date +%s)
if ! cmake --build "$build" -j "$(nproc)" "${targets[@]}" >>"$log" 2>&1; then
  grep -E -B2 -A12 'error|FAILED' "$log" | tail -n 80 >&2 || tail -n 80 "$log" >&2
  echo "strait: the build failed; the full log is $log" >&2
  exit 1
fi
elapsed=$(( $(date +%s) - start ))
[ "$elapsed" -ge 5 ] && echo "strait: built in ${elapsed} s (log: $log)" >&2
exit 0
