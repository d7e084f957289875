#!/usr/bin/env bash
# Convergence with compressed gradient averages: trains the reference transformer (`strait train`,
# 1 stage x 2 data-parallel replicas, 300 steps, one seed) once uncompressed and once
# per codec, then draws the loss curves side by side (tools/plot/plot_convergence.py) and judges
# each run's final eval loss against the uncompressed one: within 2% for bf16 and int8, 5% for the
# rest (issue 4's bars). Every run uses error feedback and the same uncompressed warm-up.
#   bench/convergence.sh [OUT_DIR]           (default bench/results/<date>-convergence)
# Environment: STEPS (300), WARMUP (30, uncompressed steps before the codec), RUNS (the codec list
# below, "SPEC=TOLERANCE" each), TRAIN_ARGS (extra `strait train` arguments).
# Exit status 1 when a run misses its bar. Takes about 3 minutes per run on 2 idle cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
out=${1:-$root/bench/results/$(date -u +%Y-%m-%d)-convergence}
steps=${STEPS:-300}
warmup=${WARMUP:-30}
read -r -a runs <<< "${RUNS:-bf16=0.02 int8=0.02 int4=0.05 topk:fraction=0.01=0.05 onebit=0.05 powersgd:rank=4=0.05}"
read -r -a extra <<< "${TRAIN_ARGS:-}"

"$root/scripts/build.sh"
"$root/scripts/setup.sh" python3-matplotlib
mkdir -p "$out"
train() {  # NAME [strait train arguments...]
  local name=$1
  shift
  echo "== $name: $build/strait train --stages 1 --replicas 2 --steps $steps --eval-every 50 --sample-bytes 0 $* ${extra[*]}"
  "$build/strait" train --stages 1 --replicas 2 --steps "$steps" --eval-every 50 --sample-bytes 0 --log-every 50 \
    --metrics "$out/$name.jsonl" "$@" "${extra[@]}" | tee "$out/$name.log" | grep -E '^(done|eval|step)'
}
train none
judged=()
for r in "${runs[@]}"; do
  spec=${r%=*}
  tol=${r##*=}
  name=${spec%%:*}
  args=${spec#"$name"}
  args=${args#:}
  file=$(echo "$spec" | tr ':=,' '___')
  train "$file" --codec "$name" ${args:+--codec-args "$args"} --codec-warmup "$warmup"
  judged+=("$out/$file.jsonl=$tol")
done
/usr/bin/python3 "$root/tools/plot/plot_convergence.py" --baseline "$out/none.jsonl" \
  --out "$out/loss_curves.png" \
  --title "strait train, $steps steps, 2 replicas: compressed gradient averages (warm-up $warmup)" \
  "${judged[@]}" | tee "$out/report.md"
