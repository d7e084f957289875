#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test through ctest.
# Extra arguments go to ctest (e.g. scripts/test.sh -R comm -V).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" --tests
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure --timeout 600 "$@"
