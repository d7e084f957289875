#!/usr/bin/env bash
# DiLoCo against plain data parallelism on loopback: `strait run -n 4 strait train --stages 2
# --replicas 2`, the same tokens, seed and inner AdamW schedule, once with a data-parallel gradient
# average every step and once per DiLoCo recipe: H = 10, 50 and 200 with an int8 outer average,
# H = 50 overlapped (--outer-overlap), and H = 50 with DiLoCo's published outer lr 0.7 / Nesterov
# 0.9 (tuned for H = 500). Then data parallelism and H = 50 again for each extra seed. Draws the
# loss curves with the bytes sent between replicas on a second axis (bench/diloco_plot.py) and
# prints bytes per step and final held-out losses (bench/diloco_report.py).
#   bench/diloco.sh [OUT_DIR]                (default $STRAIT_RESULTS_DIR/<date>-diloco,
#                                            bench/outdir.sh)
# Environment: STEPS (1000), OUTER_LR (1), OUTER_MOMENTUM (0.5): the outer step of the recipes,
# SEEDS (extra seeds for data parallelism and H = 50, e.g. "7 99"), TRAIN_ARGS (extra `strait
# train` arguments for every run; the default model is small so that a run takes 1 - 2 minutes on
# 2 shared cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${1:-$(results_dir diloco)}
steps=${STEPS:-1000}
lr=${OUTER_LR:-1}
mu=${OUTER_MOMENTUM:-0.5}
read -r -a seeds <<< "${SEEDS:-}"
read -r -a extra <<< "${TRAIN_ARGS:---layers 2 --dim 64 --heads 4 --ctx 64 --warmup 20}"
mkdir -p "$out"
if [ "${SWEEP:-}" = frontier ]; then
  # SWEEP=frontier: issue 25's comparison at the same tokens over SEEDS (default 1 2 3 4 5): data
  # parallelism, DiLoCo int8 H = 50 (blocking; overlapped one round late, and with the default
  # --outer-delay 1 naive and eager), streaming DiLoCo (5 fragments) and SparseLoCo H = SPARSE_H
  # (10) at DENSITIES (0.01 0.02) and at H = 20, 4%, outer lr 3; ONLY (a regex) picks runs, a run
  # whose metrics already hold a summary is kept. Then the loss-vs-bytes plot and the table.
  read -r -a seeds <<< "${SEEDS:-1 2 3 4 5}"
  read -r -a densities <<< "${DENSITIES:-0.01 0.02}"
  sparse_h=${SPARSE_H:-10}
  sweep() {  # NAME [strait train arguments...]
    local name=$1
    shift
    [[ $name =~ ${ONLY:-.} ]] || return 0
    grep -qs '"type":"summary"' "$out/$name.jsonl" && return 0
    local cmd=("$build/strait" run -n 4 -- "$build/strait" train --stages 2 --replicas 2
      --steps "$steps" --eval-every 250 --sample-bytes 0 --log-every 250
      --metrics "$out/$name.jsonl" "${extra[@]}" "$@")
    echo "== $name: ${cmd[*]}"
    "${cmd[@]}" > "$out/$name.log" 2>&1 || echo "== $name failed (see $out/$name.log)"
  }
  outer=(--outer-steps 50 --outer-codec int8 --outer-lr "$lr" --outer-momentum "$mu")
  for seed in "${seeds[@]}"; do
    sweep "data-parallel-seed$seed" --seed "$seed"
    sweep "diloco-int8-h50-seed$seed" --seed "$seed" "${outer[@]}"
    sweep "diloco-int8-h50-f5-seed$seed" --seed "$seed" "${outer[@]}" --outer-fragments 5
    for d in "${densities[@]}"; do
      sweep "sparseloco-d$d-h$sparse_h-seed$seed" --seed "$seed" --outer-steps "$sparse_h" \
        --outer-codec "sparseloco:density=$d" --outer-lr 1 --outer-momentum 0
    done
    # The best SparseLoCo of a seed-2 sweep along the 1000x line (H 2 - 50, outer lr 1 - 8).
    sweep "sparseloco-d0.04-h20-lr3-seed$seed" --seed "$seed" --outer-steps 20 \
      --outer-codec sparseloco:density=0.04 --outer-lr 3 --outer-momentum 0
    sweep "diloco-int8-h50-overlap-d0-seed$seed" --seed "$seed" "${outer[@]}" --outer-overlap \
      --outer-delay 0
    sweep "diloco-int8-h50-overlap-seed$seed" --seed "$seed" "${outer[@]}" --outer-overlap
    sweep "diloco-int8-h50-eager-seed$seed" --seed "$seed" "${outer[@]}" --outer-overlap \
      --outer-eager
  done
  /usr/bin/python3 "$root/bench/diloco_frontier.py" --out "$out/loss_bytes_frontier.png" "$out" |
    tee "$out/report.md"
  exit 0
fi
train() {  # NAME [strait train arguments...]
  local name=$1
  shift
  local cmd=("$build/strait" run -n 4 -- "$build/strait" train --stages 2 --replicas 2
    --steps "$steps" --eval-every 250 --sample-bytes 0 --log-every 250
    --metrics "$out/$name.jsonl" "${extra[@]}" "$@")
  echo "== $name: ${cmd[*]}"
  "${cmd[@]}" > "$out/$name.log" 2>&1
  grep -E '^ *model  ' "$out/$name.log" | head -1
}
outer=(--outer-codec int8 --outer-lr "$lr" --outer-momentum "$mu")
train data-parallel
train diloco-int8-h10 --outer-steps 10 "${outer[@]}"
train diloco-int8-h50 --outer-steps 50 "${outer[@]}"
train diloco-int8-h200 --outer-steps 200 "${outer[@]}"
train diloco-int8-h50-overlap --outer-steps 50 "${outer[@]}" --outer-overlap
train diloco-int8-h50-lr0.7-mu0.9 --outer-steps 50 --outer-codec int8
runs=("$out/diloco-int8-h10.jsonl" "$out/diloco-int8-h50.jsonl" "$out/diloco-int8-h200.jsonl"
  "$out/diloco-int8-h50-overlap.jsonl" "$out/diloco-int8-h50-lr0.7-mu0.9.jsonl")
for seed in "${seeds[@]}"; do
  train "data-parallel-seed$seed" --seed "$seed"
  train "diloco-int8-h50-seed$seed" --seed "$seed" --outer-steps 50 "${outer[@]}"
done
/usr/bin/python3 "$root/bench/diloco_plot.py" --out "$out/loss_bytes.png" \
  --title "strait train, $steps steps, 2 stages x 2 replicas: data parallel vs DiLoCo (int8)" \
  "$out/data-parallel.jsonl" "${runs[@]}"
{
  echo "seed 1337 (the default):"
  /usr/bin/python3 "$root/bench/diloco_report.py" "$out/data-parallel.jsonl" "${runs[@]}"
  for seed in "${seeds[@]}"; do
    echo "seed $seed:"
    /usr/bin/python3 "$root/bench/diloco_report.py" "$out/data-parallel-seed$seed.jsonl" \
      "$out/diloco-int8-h50-seed$seed.jsonl"
  done
} | tee "$out/report.md"
