#!/usr/bin/env bash
# Installs the Debian packages that building and running strait need (the main job:
# scripts/train.sh); `setup.sh --tests` adds what only the tests need (torch, clang for the
# fuzzers, the linters). Idempotent and silent when everything is present; run as root (or with
# sudo available). With other arguments, installs those packages instead (bench/setup-peers.sh
# uses it for the benchmark peers).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libucx-dev ucx-utils libhwloc-dev liburing-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libsodium-dev
  iproute2 procps
  fortunes
)
test_packages=(
  clang-format clang-tidy clang libclang-rt-14-dev doxygen
  python3-torch python3-xxhash python3-matplotlib
  libtorch-dev pybind11-dev python3-dev
)

if [ "${1:-}" = "--tests" ]; then
  packages+=("${test_packages[@]}")
elif [ $# -gt 0 ]; then
  packages=("$@")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# An apt cache older than a day (or absent) is refreshed once; a stale one fails with 404s.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
  $sudo apt-get update -qq >/dev/null
fi
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
