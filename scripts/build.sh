#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), configures once and builds into ${STRAIT_BUILD_DIR:-build}.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${STRAIT_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
