#!/usr/bin/env bash
# clang-tidy over every C++ source of the project (config: .clang-tidy), using the build's
# compile_commands.json. Slow (about a minute per file on 2 cores), so not part of the ctest run.
# usage: scripts/lint.sh [files...]   (default: every tracked .cpp)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" >/dev/null
cd "$root"
# python/ext (the torch extension) is left out: clang-tidy 14 cannot parse torch 1.13's headers in
# C++20 (errors inside ATen's ivalue_inl.h); g++ builds it with the project's warnings as errors.
if [ $# -eq 0 ]; then mapfile -t files < <(git ls-files '*.cpp' ':!python/ext'); else files=("$@"); fi
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" --quiet 2>/dev/null
