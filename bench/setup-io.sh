#!/usr/bin/env bash
# Installs fio (Debian's), the peer bench/compare_offload_io.sh measures strait's I/O engines
# against. A benchmark dependency only, kept out of scripts/setup.sh's own list so that CI stays
# fast. Idempotent and silent when it is present; run as root (or with sudo).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "$root/scripts/setup.sh" fio
