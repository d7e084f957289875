#!/usr/bin/env bash
# Installs the peers bench/compare_allreduce.sh measures strait against: PyTorch (Gloo) from Debian
# and Open MPI. Benchmark dependencies only, kept out of scripts/setup.sh so that CI stays fast.
# Idempotent and silent when everything is present; run as root (or with sudo available).
set -euo pipefail

packages=(python3-torch openmpi-bin libopenmpi-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup-peers: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup-peers: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
  $sudo apt-get update -qq >/dev/null
fi
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
