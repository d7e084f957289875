#!/usr/bin/env bash
# strait vs Gloo through torch.distributed: f32 sum all_reduce, 8 B .. 256 MiB, 2 ranks on this
# machine, in one job (bench/torch_allreduce.py: the default group is strait's, a gloo group
# spans the same ranks, and each size is timed with strait then gloo), plus the strait backend's
# Python/binding overhead per call (8 B through the ProcessGroup minus straitAllReduce of the same
# 8 B on the same communicator; the same on a group of one rank).
#   bench/compare_torch.sh [RANKS]        (default 2)
# Then strait-bench's allreduce (C++, no Python) over the same range, as the baseline below the
# binding. Writes torch.json, strait_bench.json and torch.log to $STRAIT_COMPARE_OUT (default
# $STRAIT_RESULTS_DIR/DATE-torch, bench/outdir.sh; data only).
# Environment: SIZES (8,64,512,4K,16K,64K,256K,1M,4M,16M,64M,256M), SMALL_ITERS (1000,
# up to 64 KiB), LARGE_ITERS (50, up to 4 MiB), HUGE_ITERS (5), OVERHEAD_ITERS (2000,
# 2-rank overhead calls per round), LOCAL_ITERS (20000, 1-rank ones), ROUNDS (5),
# BENCH_ITERS (20, strait-bench's timed calls per size).
# Needs a built tree (scripts/build.sh) and Debian's python3-torch (scripts/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
ranks=${1:-2}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir torch)}
python=/usr/bin/python3  # Debian's, which has python3-torch; `python3` on PATH may not
if [ ! -x "$build/strait" ] || [ ! -e "$build/lib/libstrait.so" ]; then "$root/scripts/build.sh"; fi
mkdir -p "$out"
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# torch $($python -c 'import torch; print(torch.__version__)'), $ranks ranks, commit $(git -C "$root" rev-parse --short HEAD)"
  PYTHONPATH=$root/python STRAIT_LIBRARY=$build/lib/libstrait.so PYTHONWARNINGS=ignore \
    "$build/strait" run -n "$ranks" -- "$python" "$root/bench/torch_allreduce.py" \
      --sizes "${SIZES:-8,64,512,4K,16K,64K,256K,1M,4M,16M,64M,256M}" \
      --small-iters "${SMALL_ITERS:-1000}" --large-iters "${LARGE_ITERS:-50}" \
      --huge-iters "${HUGE_ITERS:-5}" --overhead-iters "${OVERHEAD_ITERS:-2000}" \
      --local-iters "${LOCAL_ITERS:-20000}" \
      --rounds "${ROUNDS:-5}" --json "$out/torch.json"
  # The same allreduce from C++ (no Python), right after: where both are slow, the cause is
  # below the binding.
  echo "# strait-bench (C++, no Python), same sizes' range, load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$build/strait" run -n "$ranks" -- "$build/strait-bench" allreduce -b 8 -e 256M -f 4 \
    -n "${BENCH_ITERS:-20}" -w 3 -c 0 --json "$out/strait_bench.json"
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$out/torch.log"
echo "compare_torch: results in $out" >&2
