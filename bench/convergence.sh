#!/usr/bin/env bash
# Convergence with compressed gradient averages: trains the reference transformer (`strait train`,
# 1 stage x 2 data-parallel replicas, 300 steps, one seed) once uncompressed and once
# per codec, then draws the loss curves side by side (tools/plot/plot_convergence.py) and judges
# each run's final eval loss against the uncompressed one: within 2% for bf16 and int8, 5% for the
# rest (issue 4's bars). Every run uses error feedback and the same uncompressed warm-up.
#   bench/convergence.sh [OUT_DIR]           (default $STRAIT_RESULTS_DIR/<date>-convergence,
#                                            bench/outdir.sh)
# Environment: STEPS (300), WARMUP (30, uncompressed steps before the codec, unless a run sets
# its own), RUNS (the list below: "SPEC=TOLERANCE[/ARG/ARG...]" each, the ARGs extra `strait train`
# arguments for that run, e.g. "onebit=0.05/--compress/momentum"), TRAIN_ARGS (extra arguments for
# every run), PARALLEL (1: all runs at once, for machines with many cores; the results do not
# depend on it).
# The default recipes: the casts and quantizers average gradients after 30 steps; onebit and top-k
# compress the momentum (1-bit Adam), top-k after 150 steps (after 100 it ends 6% above
# uncompressed); PowerSGD averages gradients after 100.
# Exit status 1 when a run misses its bar. Takes about 3 minutes per run on 2 idle cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${1:-$(results_dir convergence)}
steps=${STEPS:-300}
warmup=${WARMUP:-30}
read -r -a runs <<< "${RUNS:-bf16=0.02 int8=0.02 int4=0.05 topk:fraction=0.01=0.05/--compress/momentum/--codec-warmup/150 onebit=0.05/--compress/momentum powersgd:rank=4=0.05/--codec-warmup/100}"
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
pids=()
launch() {  # runs train in the background with PARALLEL=1, else in the foreground
  if [ "${PARALLEL:-0}" = 1 ]; then train "$@" & pids+=($!); else train "$@"; fi
}
launch none
judged=()
for r in "${runs[@]}"; do
  IFS=/ read -r -a parts <<< "$r"
  head=${parts[0]}
  spec=${head%=*}
  tol=${head##*=}
  name=${spec%%:*}
  args=${spec#"$name"}
  args=${args#:}
  recipe=("${parts[@]:1}")
  file=$(echo "$spec${recipe[*]:+ ${recipe[*]}}" | tr ':=, ' '____' | tr -s '_-' | sed 's/_-/_/g')
  own=()  # the run's own warm-up replaces WARMUP (strait train takes a flag once)
  [[ " ${recipe[*]} " == *" --codec-warmup "* ]] || own=(--codec-warmup "$warmup")
  launch "$file" --codec "$name" ${args:+--codec-args "$args"} "${own[@]}" "${recipe[@]}"
  judged+=("$out/$file.jsonl=$tol")
done
for p in "${pids[@]}"; do wait "$p"; done
/usr/bin/python3 "$root/tools/plot/plot_convergence.py" --baseline "$out/none.jsonl" \
  --out "$out/loss_curves.png" \
  --title "strait train, $steps steps, 2 replicas: compressed averages (recipes in the legend)" \
  "${judged[@]}" | tee "$out/report.md"
