#!/usr/bin/env bash
# clang-tidy over every C++ source of the project (config: .clang-tidy), using the build's
# compile_commands.json. Slow (about a minute per file on 2 cores), so not part of the ctest run.
# usage: scripts/lint.sh [files...]   (default: every tracked .cpp)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" >/dev/null
cd "$root"
if [ $# -eq 0 ]; then mapfile -t files < <(git ls-files '*.cpp'); else files=("$@"); fi
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" --quiet 2>/dev/null
