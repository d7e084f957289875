#!/usr/bin/env bash
# Quorum rounds against waiting for every replica, with one replica of three slowed for real: its
# rank runs in a cgroup (v1 cpu controller, root) with half a process's CPU weight (cpu.shares 512)
# and capped at QUOTA (default 40%) of one core: on 2 cores the other two then get about 0.8 each, so
# it runs at about half their speed. Whether that made it slower shows in the report's
# last column (rounds it was in): on a machine loaded by other jobs it may not.
# `strait train --stages 1 --replicas 3 --outer-steps H` (plain DiLoCo: every round waits for all)
# and the same with `--quorum 2 --grace 0` (bench/diloco.sh's small model, the same token budget),
# interleaved per seed; then tokens/s and held-out loss per seed (bench/quorum_report.py).
#   bench/quorum.sh [OUT_DIR]     (default $STRAIT_RESULTS_DIR/<date>-quorum, bench/outdir.sh)
# Environment: STEPS (1000), H (10), SEEDS ("1 2 3"), QUOTA (40000 of a 100000 us period), SHARES,
# CGROUP (/sys/fs/cgroup/cpu/strait-quorum-slow, made and removed here).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${1:-$(results_dir quorum)}
steps=${STEPS:-1000}
h=${H:-10}
read -r -a seeds <<< "${SEEDS:-1 2 3}"
cg=${CGROUP:-/sys/fs/cgroup/cpu/strait-quorum-slow}
mkdir -p "$out"
mkdir -p "$cg" || { echo "quorum.sh: cannot make $cg (needs root and cgroup v1's cpu)" >&2; exit 2; }
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo 100000 > "$cg/cpu.cfs_period_us"
echo "${QUOTA:-40000}" > "$cg/cpu.cfs_quota_us"
echo "${SHARES:-512}" > "$cg/cpu.shares"
run() {  # NAME [strait train arguments...]: rank 2 (replica 2) runs in the cgroup
  local name=$1
  shift
  local train=("$build/strait" train --stages 1 --replicas 3 --steps "$steps" --outer-steps "$h"
    --outer-lr 1 --outer-momentum 0.5 --eval-every 0 --sample-bytes 0 --log-every 250
    --layers 2 --dim 64 --heads 4 --ctx 64 --warmup 20 --metrics "$out/$name.jsonl" "$@")
  echo "== $name: ${train[*]}"
  # shellcheck disable=SC2016 # $RANK and $$ belong to the rank's shell
  "$build/strait" run -n 3 -- sh -c '[ "$RANK" != 2 ] || echo $$ > "$0/cgroup.procs"; shift; exec "$@"' \
    "$cg" -- "${train[@]}" > "$out/$name.log" 2>&1 || echo "== $name failed (see $out/$name.log)"
}
for seed in "${seeds[@]}"; do
  run "wait-all-seed$seed" --seed "$seed"
  run "quorum2-seed$seed" --seed "$seed" --quorum 2 --grace 0
done
/usr/bin/python3 "$root/bench/quorum_report.py" "$out" | tee "$out/report.md"
