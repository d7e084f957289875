#!/usr/bin/env bash
# Two settings of strait's allreduce (f32 sum) in alternating rounds, the fastest round of each
# kept: on a machine shared with other work the minimum over rounds is the figure least moved by
# the load (the mean of one run moves 2 - 10x here, bench/RESULTS.md).
#   [ROUNDS=4] [ITERS=5] [RANKS=2] [MIN=1M] [MAX=256M] \
#     bench/compare_allreduce_ab.sh BUILD_A "ENV_A" BUILD_B "ENV_B"
# BUILD_*: folders holding `strait` and `strait-bench` (e.g. a build of the parent commit, and
# build/); ENV_*: VAR=VALUE settings for that side ("" for none), e.g. "STRAIT_TUNE=allreduce:
# 1M-inf:direct". Prints, per side and size, the best out-of-place and in-place time per call
# (strait-bench -n ITERS after 2 warm-ups, sizes MIN .. MAX by 4x) with its algbw, and the wrong
# elements summed over all rounds (-c 1 checks every call).
set -euo pipefail
a=$1 env_a=$2 b=$3 env_b=$4
rounds=${ROUNDS:-4} iters=${ITERS:-5} ranks=${RANKS:-2} min=${MIN:-1M} max=${MAX:-256M}
echo "# $(date -u '+%H:%M:%S UTC') load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  for side in A B; do
    if [ "$side" = A ]; then dir=$a; settings=$env_a; else dir=$b; settings=$env_b; fi
    # shellcheck disable=SC2086  # settings: VAR=VALUE words for env
    env $settings timeout 600 "$dir/strait" run -n "$ranks" -- "$dir/strait-bench" allreduce \
      -b "$min" -e "$max" -f 4 -n "$iters" -w 2 -d f32 -o sum -c 1 2>&1 |
      awk -v side="$side" '/^ +[0-9]/ {print side, $1, $6, $10, $9}'
  done
done | awk '{k = $1 " " $2
             if (!(k in o) || $3 < o[k]) o[k] = $3
             if (!(k in i) || $4 < i[k]) i[k] = $4
             w[k] += $5}
            END {for (k in o) print k, o[k], i[k], w[k]}' | sort -k2,2n -k1,1 |
  awk '{printf "%s %10d B  out %10.1f us (%5.2f GB/s)  in %10.1f us (%5.2f GB/s)  wrong %d\n",
        $1, $2, $3, $2 / $3 / 1000, $4, $2 / $4 / 1000, $5}'
echo "# $(date -u '+%H:%M:%S UTC') load $(cut -d' ' -f1-3 /proc/loadavg)"
