#!/usr/bin/env bash
# DDP training of examples/ddp_gpt.py across the WAN testbed (2 sites x 1 rank, RATE each way,
# tools/wan/testbed.h): Gloo uncompressed against Gloo with strait's int8 hook
# (strait.torch.hooks.compressed_allreduce; the hook's own strait communicator carries the
# gradients), same seed, data and model. Prints each run's median step time (after its first 2
# steps), the speed-up, and the held-out loss after STEPS steps with its difference to
# uncompressed. Needs root (namespaces, tc) and a built tree.
#   sudo bench/compare_ddp_wan.sh
# Environment: STEPS (300), RATE (100mbit), HOOKS ("int8"), START_ITER (10), MODEL (a model
# where communication dominates at 100 Mbit/s: "--layers 2 --dim 384 --ctx 32 --batch 2
# --bucket-mb 1", 3.66 M parameters, 14.6 MB of f32 gradients per step, 1.17 s on the link for
# Gloo's 2-rank ring, about 0.2 s of compute at load 12; 1 MB buckets so that the allreduces start
# while backward still runs, for both), OUT ($STRAIT_RESULTS_DIR/DATE-ddp-wan,
# bench/outdir.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
steps=${STEPS:-300}
rate=${RATE:-100mbit}
start_iter=${START_ITER:-10}
model=${MODEL:---layers 2 --dim 384 --ctx 32 --batch 2 --bucket-mb 1}
read -r -a hooks <<< "${HOOKS:-int8}"
source "$root/bench/outdir.sh"
out=${OUT:-$(results_dir ddp-wan)}
prefix=sdw$$
strait=$build/strait
mkdir -p "$out"
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} STRAIT_LIBRARY=$build/lib/libstrait.so
trap '"$strait" wan down --prefix "$prefix" >/dev/null 2>&1 || true' EXIT
"$strait" wan up --prefix "$prefix" --rate "$rate" >/dev/null
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1 /proc/loadavg): ddp_gpt.py $model, 2 sites x 1 rank, $rate, $steps steps, hook warm-up $start_iter steps"
run() {  # NAME HOOK
  # shellcheck disable=SC2086  # MODEL is a list of flags
  GLOO_SOCKET_IFNAME=wan0 "$strait" wan run --prefix "$prefix" --ranks-per-site 1 -- \
    /usr/bin/python3 "$root/examples/ddp_gpt.py" --backend gloo --hook "$2" \
    --start-iter "$start_iter" --steps "$steps" --quiet --log "$out/wan_$1.jsonl" $model >/dev/null
}
run gloo NONE
for h in "${hooks[@]}"; do run "$(echo "$h" | tr ':=,' '___')" "$h"; done
/usr/bin/python3 - "$out" "${hooks[@]}" <<'PY'
import json, sys
out, hooks = sys.argv[1], sys.argv[2:]
def final(name):
    return [json.loads(l) for l in open(f"{out}/wan_{name}.jsonl")][-1]
base = final("gloo")
print("| run | median step (s) | speed-up vs gloo | held-out loss | vs gloo's |")
print("|---|---:|---:|---:|---:|")
print(f"| gloo, uncompressed | {base['median_step_s']:.3f} | 1.00x | {base['held_out_loss']:.4f} | - |")
for h in hooks:
    s = final(h.replace(":", "_").replace("=", "_").replace(",", "_"))
    print(f"| gloo + strait {h} hook | {s['median_step_s']:.3f} | "
          f"{base['median_step_s'] / s['median_step_s']:.2f}x | {s['held_out_loss']:.4f} | "
          f"{100 * (s['held_out_loss'] / base['held_out_loss'] - 1):+.2f}% |")
PY
