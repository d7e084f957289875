#!/usr/bin/env bash
# DDP step time of examples/ddp_gpt.py, 2 ranks on this machine, uncompressed, alternating in one
# run so that load drifts hit every setting alike. Settings are BACKEND:HOOK:
#   gloo:NONE     torch's Gloo carries DDP's gradients (the reference)
#   gloo:none     Gloo process group, gradients through strait.torch.hooks with codec "none":
#                 strait's plain averaging allreduce (what the hook's warm-up and a strait user
#                 keeping Gloo get)
#   strait:NONE   backend "strait" (python/strait/torch, branch torch), DDP's own allreduce
# A setting whose backend is not importable is reported and left out. Each round runs every
# setting once (order reversed every other round); a run's figure is the median step time after
# its first 2 steps (rank 0: forward, backward with DDP's overlapped allreduce, optimizer).
#   bench/compare_ddp.sh [ROUNDS]        (default 3)
# Environment: STEPS (50), MODEL ("--layers 2 --dim 128 --ctx 64 --batch 8"), SETTINGS
# ("strait:NONE gloo:NONE gloo:none"), OUT ($STRAIT_RESULTS_DIR/DATE-ddp,
# bench/outdir.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
rounds=${1:-3}
steps=${STEPS:-50}
model=${MODEL:---layers 2 --dim 128 --ctx 64 --batch 8}
source "$root/bench/outdir.sh"
out=${OUT:-$(results_dir ddp)}
read -r -a wanted <<< "${SETTINGS:-strait:NONE gloo:NONE gloo:none}"
mkdir -p "$out"
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} STRAIT_LIBRARY=$build/lib/libstrait.so
settings=()
for s in "${wanted[@]}"; do
  if [ "${s%%:*}" = strait ] && ! /usr/bin/python3 -c 'import strait.torch, torch.distributed as d; d.Backend("strait")' 2>/dev/null; then
    echo "# $s left out: the strait torch backend is not importable (strait.torch, branch torch)"
    continue
  fi
  settings+=("$s")
done
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1 /proc/loadavg): ddp_gpt.py $model, 2 ranks, $steps steps"
echo "| round | backend | hook | median step (ms) | held-out loss |"
echo "|---|---|---|---:|---:|"
for ((r = 0; r < rounds; r++)); do
  order=("${settings[@]}")
  if ((r % 2 == 1)); then
    order=()
    for ((i = ${#settings[@]} - 1; i >= 0; i--)); do order+=("${settings[i]}"); done
  fi
  for s in "${order[@]}"; do
    b=${s%%:*} h=${s#*:}
    log=$out/ddp_${b}_${h}_round$r.jsonl
    # shellcheck disable=SC2086  # MODEL is a list of flags
    "$build/strait" run -n 2 -- /usr/bin/python3 "$root/examples/ddp_gpt.py" --backend "$b" \
      --hook "$h" --start-iter 0 --steps "$steps" --quiet --log "$log" $model >/dev/null
    /usr/bin/python3 - "$log" "$r" "$b" "$h" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {s['median_step_s'] * 1e3:.2f} | "
      f"{s['held_out_loss']:.6f} |")
PY
  done
done
/usr/bin/python3 - "$out" "${settings[@]}" <<'PY'
import glob, json, statistics, sys
out, settings = sys.argv[1], sys.argv[2:]
med = {}
for s in settings:
    b, h = s.split(":", 1)
    runs = [[json.loads(l) for l in open(f)][-1]["median_step_s"]
            for f in sorted(glob.glob(f"{out}/ddp_{b}_{h}_round*.jsonl"))]
    med[s] = statistics.median(runs)
    print(f"# {s}: median over {len(runs)} rounds {med[s] * 1e3:.2f} ms/step")
for s in settings:
    if s != "gloo:NONE" and "gloo:NONE" in med:
        print(f"# {s} / gloo:NONE step time: {med[s] / med['gloo:NONE']:.3f} (bar: <= 1)")
PY
