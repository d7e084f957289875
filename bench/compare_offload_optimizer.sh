#!/usr/bin/env bash
# The optimizer-state offload bar: a training step of the reference transformer with the AdamW
# moments on NVMe (`--offload-optimizer nvme`) against the same step with them in RAM
# (`--offload-optimizer cpu`); the bar is nvme / cpu <= 1.3.
#   bench/compare_offload_optimizer.sh [extra `strait train` arguments...]
# Environment: LAYERS (8), DIM (512), HEADS (8), STAGES (1), REPLICAS (1), STEPS (20), SKIP (3:
# warm-up steps left out of the medians), ROUNDS (2: cpu and nvme alternate which runs first),
# DIR (/var/tmp: the offload directory; use a real disk, not tmpfs).
# Writes each run's metrics (JSON lines) and the report to $STRAIT_COMPARE_OUT (default
# $STRAIT_RESULTS_DIR/DATE-offload-optimizer, bench/outdir.sh) and prints: per run the median
# step time after SKIP steps, the optimizer's share (its median time, the update's and the wait for
# I/O) and the disk traffic rate; per round nvme / cpu, measured and estimated as (cpu step + the
# optimizer's extra time on nvme) / cpu step, which a shared machine's noise in the forward and
# backward passes does not reach; and whether the two runs' losses are bit-identical (they must be).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
layers=${LAYERS:-8}
dim=${DIM:-512}
heads=${HEADS:-8}
stages=${STAGES:-1}
replicas=${REPLICAS:-1}
steps=${STEPS:-20}
skip=${SKIP:-3}
rounds=${ROUNDS:-2}
dir=${DIR:-/var/tmp}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir offload-optimizer)}

[ -x "$build/strait" ] || cmake --build "$build" --target strait
mkdir -p "$out"
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs))"
  echo "# $dir: $(df -T "$dir" | awk 'NR==2 {print $1 " (" $2 ")"}'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# strait train --stages $stages --replicas $replicas --layers $layers --dim $dim --heads $heads --steps $steps $*"
} | tee "$out/report.md"

run() {  # run NAME PLACEMENT [extra arguments]
  local name=$1 placement=$2
  shift 2
  echo "# $name: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$build/strait" train --stages "$stages" --replicas "$replicas" --layers "$layers" --dim "$dim" \
    --heads "$heads" --steps "$steps" --sample-bytes 0 --eval-sequences 4 --log-every 5 \
    --offload-optimizer "$placement" --offload-dir "$dir" --metrics "$out/$name.jsonl" "$@" \
    >"$out/$name.out" 2>&1 || { cat "$out/$name.out" >&2; exit 1; }
}
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then order="cpu nvme"; else order="nvme cpu"; fi
  for placement in $order; do
    run "r$round-$placement" "$placement" "$@"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/report.md"

python3 - "$out" "$rounds" "$skip" <<'PY' | tee -a "$out/report.md"
import json, statistics, sys
out, rounds, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def steps(name):
    return [r for r in map(json.loads, open(f"{out}/{name}.jsonl")) if r["type"] == "step"]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print()
print("| round | placement | median step s | median optimizer s | update s | I/O wait s | optimizer I/O GB/s | losses bit-identical |")
print("|---|---|---|---|---|---|---|---|")
ratios, estimates = [], []
for r in range(1, rounds + 1):
    runs = {p: steps(f"r{r}-{p}") for p in ("cpu", "nvme")}
    same = [a["loss"] for a in runs["cpu"]] == [b["loss"] for b in runs["nvme"]]
    row, opt_of = {}, {}
    for p, s in runs.items():
        t = s[skip:]
        row[p] = med([x["seconds"] for x in t])
        opt = opt_of[p] = med([x["optimizer_seconds"] for x in t])
        gbs = med([x["optimizer_io_bytes"] / x["optimizer_seconds"] / 1e9 for x in t if x["optimizer_io_bytes"]])
        print(f"| {r} | {p} | {row[p]:.3f} | {opt:.3f} | {med([x['optimizer_compute_seconds'] for x in t]):.3f} | "
              f"{med([x['optimizer_io_wait_seconds'] for x in t]):.3f} | "
              f"{'-' if gbs != gbs else f'{gbs:.2f}'} | {'yes' if same else 'NO'} |")
    ratios.append(row["nvme"] / row["cpu"])
    # The runs differ only in the optimizer step, so the cpu step plus the optimizer's extra time
    # on nvme estimates the ratio without the run-to-run noise of the forward and backward passes.
    estimates.append(1 + (opt_of["nvme"] - opt_of["cpu"]) / row["cpu"])
print()
for r, (x, e) in enumerate(zip(ratios, estimates), 1):
    print(f"round {r}: nvme / cpu = {x:.3f}x (median step after {skip} warm-up steps); "
          f"from the optimizer's times: {e:.3f}x")
print(f"bar (<= 1.3x): {'met' if max(ratios) <= 1.3 else 'NOT met'} (worst round {max(ratios):.3f}x)")
PY
