#!/usr/bin/env bash
# DiLoCo against plain data parallelism on loopback: `strait run -n 4 strait train --stages 2
# --replicas 2`, the same tokens, seed and inner AdamW schedule, once with a data-parallel gradient
# average every step and once per DiLoCo recipe (--outer-steps H with an int8 outer average, with
# and without --outer-overlap). Draws the loss curves (tools/plot/plot_convergence.py) and prints
# the bytes strait's allreduce statistics counted, per step, between the replicas and in all, and
# each run's final held-out loss (bench/diloco_report.py). Recipes: H with DiLoCo's outer lr 0.7
# and Nesterov 0.9, the same overlapped, H with outer lr 1 and no momentum, and H = 50.
#   bench/diloco.sh [OUT_DIR]                (default bench/results/<date>-diloco)
# Environment: STEPS (200), H (10), TRAIN_ARGS (extra `strait train` arguments for every run; the
# default model is small so that a run takes about a minute on 2 shared cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
out=${1:-$root/bench/results/$(date -u +%Y-%m-%d)-diloco}
steps=${STEPS:-200}
h=${H:-10}
read -r -a extra <<< "${TRAIN_ARGS:---layers 2 --dim 64 --heads 4 --ctx 64 --warmup 20}"
mkdir -p "$out"
train() {  # NAME [strait train arguments...]
  local name=$1
  shift
  local cmd=("$build/strait" run -n 4 -- "$build/strait" train --stages 2 --replicas 2
    --steps "$steps" --eval-every 50 --sample-bytes 0 --log-every 50 --metrics "$out/$name.jsonl"
    "${extra[@]}" "$@")
  echo "== $name: ${cmd[*]}"
  "${cmd[@]}" | tee "$out/$name.log" | grep -E '^(done|eval|step|DiLoCo)'
}
train data-parallel
train diloco-int8 --outer-steps "$h" --outer-codec int8
train diloco-int8-overlap --outer-steps "$h" --outer-codec int8 --outer-overlap
# Model averaging (outer lr 1, no momentum): DiLoCo's 0.7 / 0.9 were tuned for H = 500.
train diloco-int8-lr1-mu0 --outer-steps "$h" --outer-codec int8 --outer-lr 1 --outer-momentum 0
train diloco-int8-h50 --outer-steps 50 --outer-codec int8
runs=("$out/diloco-int8.jsonl" "$out/diloco-int8-overlap.jsonl" "$out/diloco-int8-lr1-mu0.jsonl"
  "$out/diloco-int8-h50.jsonl")
/usr/bin/python3 "$root/tools/plot/plot_convergence.py" --baseline "$out/data-parallel.jsonl" \
  --out "$out/loss_curves.png" \
  --title "strait train, $steps steps, 2 stages x 2 replicas: data parallel vs DiLoCo" \
  "${runs[@]}" | tee "$out/report.md"
/usr/bin/python3 "$root/bench/diloco_report.py" "$out/data-parallel.jsonl" "${runs[@]}" |
  tee -a "$out/report.md"
