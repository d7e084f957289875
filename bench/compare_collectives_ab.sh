#!/usr/bin/env bash
# Before/after strait-bench at 2 ranks (reduce_scatter, allgather, broadcast, alltoall at 64 MiB),
# with one core's memcpy, in one run:
#   BASE=DIR NEW=DIR ROUNDS="1" bench/compare_collectives_ab.sh [OUT]
# (OUT: default $STRAIT_RESULTS_DIR/DATE-collectives-ab, bench/outdir.sh)
# BASE and NEW hold `strait` and `strait-bench` (BASE: a build of commit a037133, the parent of the
# single-copy work; NEW: this tree's build/). Run from the repository root.
set -u
source bench/outdir.sh
out=${1:-$(results_dir collectives-ab)}; mkdir -p "$out"
new=${NEW:-build}; base=${BASE:?set BASE to a folder with the old strait and strait-bench}
echo "# $(date -u '+%H:%M:%S UTC') load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/quick.txt"
for round in ${ROUNDS:-1 2}; do
  /usr/bin/python3 bench/memcpy_bound.py -b 1M -e 256M -f 4 -n 10 -w 2 --json "$out/memcpy-$round.json" | tee -a "$out/quick.txt"
  for which in base new; do
    d=$base; [ $which = new ] && d=$new
    echo "## $which allreduce, round $round" | tee -a "$out/quick.txt"
    timeout 300 "$d/strait" run -n 2 -- "$d/strait-bench" allreduce -b 1M -e 256M -f 4 -n 5 -w 1 -d f32 -o sum -c 0 2>&1 | grep -v "^#  \|^$" | tee -a "$out/quick.txt"
    for c in reduce_scatter allgather broadcast alltoall; do
      echo "## $which $c 64M, round $round" | tee -a "$out/quick.txt"
      timeout 300 "$d/strait" run -n 2 -- "$d/strait-bench" $c -b 64M -e 64M -n 5 -w 1 -d f32 -o sum -c 0 2>&1 | grep -E "^ +[0-9]" | tee -a "$out/quick.txt"
    done
  done
done
echo "# $(date -u '+%H:%M:%S UTC') load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/quick.txt"
