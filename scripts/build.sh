#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), configures once and builds into
# ${STRAIT_BUILD_DIR:-build}. The compiler's output goes to build.log in the build folder and is
# shown only when the build fails, so the main job's output stays readable.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
mkdir -p "$build"
log="$build/build.log"
if [ ! -f "$build/build.ninja" ]; then
  echo "strait: configuring and building in $build (the first build takes a few minutes)" >&2
  if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${STRAIT_CMAKE_ARGS:-} >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
fi
start=$(date +%s)
if ! cmake --build "$build" -j "$(nproc)" >>"$log" 2>&1; then
  grep -E -B2 -A12 'error|FAILED' "$log" | tail -n 80 >&2 || tail -n 80 "$log" >&2
  echo "strait: the build failed; the full log is $log" >&2
  exit 1
fi
elapsed=$(( $(date +%s) - start ))
[ "$elapsed" -ge 5 ] && echo "strait: built in ${elapsed} s (log: $log)" >&2
exit 0
