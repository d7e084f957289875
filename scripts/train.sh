#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs `strait train` (defaults:
# 2 pipeline stages x 2 data-parallel replicas on this machine, on the fortunes corpus).
# Extra arguments go to `strait train` (see `build/strait train --help`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" strait  # only what the main job runs; scripts/test.sh builds the rest
exec "$build/strait" train "$@"
