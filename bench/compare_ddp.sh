#!/usr/bin/env bash
# DDP step time of examples/ddp_gpt.py, 2 ranks on this machine, uncompressed: torch's Gloo backend
# against strait's ("strait", tools/python/strait/torch), alternating in one run so that load
# drifts hit both alike. Each round runs both backends once (in alternating order) for STEPS steps;
# a run's figure is the median step time after its first 2 steps (rank 0, forward + backward with
# DDP's overlapped allreduce + optimizer). Prints one row per run and the medians over rounds;
# writes the JSON logs under OUT.
#   bench/compare_ddp.sh [ROUNDS]        (default 3)
# Environment: STEPS (50), MODEL ("--layers 2 --dim 64 --ctx 64 --batch 8"), OUT
# (bench/results/$(date +%F)-ddp), BACKENDS ("strait gloo").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
rounds=${1:-3}
steps=${STEPS:-50}
model=${MODEL:---layers 2 --dim 64 --ctx 64 --batch 8}
out=${OUT:-$root/bench/results/$(date -u +%F)-ddp}
read -r -a backends <<< "${BACKENDS:-strait gloo}"
mkdir -p "$out"
export PYTHONPATH=$root/tools/python${PYTHONPATH:+:$PYTHONPATH} STRAIT_LIBRARY=$build/lib/libstrait.so
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1 /proc/loadavg): ddp_gpt.py $model, 2 ranks, $steps steps, no hook"
echo "| round | backend | median step (ms) | held-out loss |"
echo "|---|---|---:|---:|"
for ((r = 0; r < rounds; r++)); do
  order=("${backends[@]}")
  if ((r % 2 == 1)); then order=(); for ((i = ${#backends[@]} - 1; i >= 0; i--)); do order+=("${backends[i]}"); done; fi
  for b in "${order[@]}"; do
    log=$out/ddp_${b}_round$r.jsonl
    # shellcheck disable=SC2086  # MODEL is a list of flags
    "$build/strait" run -n 2 -- /usr/bin/python3 "$root/examples/ddp_gpt.py" --backend "$b" \
      --steps "$steps" --quiet --log "$log" $model >/dev/null
    /usr/bin/python3 - "$log" "$r" "$b" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {s['median_step_s'] * 1e3:.2f} | {s['held_out_loss']:.6f} |")
PY
  done
done
/usr/bin/python3 - "$out" "${backends[@]}" <<'PY'
import glob, json, statistics, sys
out, backends = sys.argv[1], sys.argv[2:]
med = {}
for b in backends:
    runs = [[json.loads(l) for l in open(f)][-1]["median_step_s"]
            for f in sorted(glob.glob(f"{out}/ddp_{b}_round*.jsonl"))]
    med[b] = statistics.median(runs)
    print(f"# {b}: median over {len(runs)} rounds {med[b] * 1e3:.2f} ms/step")
if "strait" in med and "gloo" in med:
    print(f"# strait / gloo step time: {med['strait'] / med['gloo']:.3f} (bar: <= 1)")
PY
