#!/usr/bin/env bash
# DiLoCo across two sites of the WAN testbed (`strait wan`, network namespaces joined by a
# 100 Mbit/s tbf-shaped link; needs root): 2 stages x 2 replicas with one replica per site, so the
# link carries only what the replicas exchange. Runs plain data parallelism and DiLoCo with an
# int8 and an uncompressed outer average, each blocking and overlapped (--outer-overlap), the same
# tokens for all, and reports bytes per step between the replicas, the final held-out loss and the
# compute utilisation (time in inner steps / training time; bench/diloco_report.py).
#   bench/diloco_wan.sh [OUT_DIR]            (default $STRAIT_RESULTS_DIR/<date>-diloco-wan,
#                                            bench/outdir.sh)
# Environment: STEPS (100), H (10), RATE (100mbit), TRAIN_ARGS (extra `strait train` arguments;
# default: the default model), PREFIX / SUBNET / PORT (the testbed's names, so that it does not
# collide with another testbed on the machine).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${1:-$(results_dir diloco-wan)}
steps=${STEPS:-100}
h=${H:-10}
rate=${RATE:-100mbit}
read -r -a extra <<< "${TRAIN_ARGS:-}"
wan=("$build/strait" wan run --prefix "${PREFIX:-dlc}" --subnet "${SUBNET:-10.79.3}"
  --master-port "${PORT:-29731}" --rate "$rate" --ranks-per-site 2 --)
mkdir -p "$out"
train() {  # NAME [strait train arguments...]
  local name=$1
  shift
  local cmd=("${wan[@]}" "$build/strait" train --stages 2 --replicas 2 --steps "$steps"
    --eval-every 50 --sample-bytes 0 --log-every 10 --metrics "$out/$name.jsonl" "${extra[@]}" "$@")
  echo "== $name: ${cmd[*]}"
  "${cmd[@]}" | tee "$out/$name.log" | grep -E '^(done|eval|DiLoCo)'
}
train data-parallel
train diloco-none --outer-steps "$h"
train diloco-none-overlap --outer-steps "$h" --outer-overlap
train diloco-int8 --outer-steps "$h" --outer-codec int8
train diloco-int8-overlap --outer-steps "$h" --outer-codec int8 --outer-overlap
/usr/bin/python3 "$root/bench/diloco_report.py" "$out/data-parallel.jsonl" \
  "$out/diloco-none.jsonl" "$out/diloco-none-overlap.jsonl" "$out/diloco-int8.jsonl" \
  "$out/diloco-int8-overlap.jsonl" | tee "$out/report.md"
