#!/usr/bin/env bash
# Installs the peers bench/compare_allreduce.sh measures strait against: PyTorch (Gloo) from Debian
# and Open MPI, and matplotlib for its plot. Benchmark dependencies only, kept out of scripts/setup.sh's own list so that CI
# stays fast. Idempotent and silent when everything is present; run as root (or with sudo).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "$root/scripts/setup.sh" python3-torch openmpi-bin libopenmpi-dev python3-matplotlib
