#!/usr/bin/env bash
# strait's CPU AdamW vs torch.optim.AdamW (Debian's python3-torch) on the same parameter counts and
# thread count, and the memory-bandwidth bound from a triad measured in strait's run.
#   bench/compare_adamw.sh [THREADS]        (default: nproc)
# Environment: SIZES (16777216,67108864 = 2^24,2^26 floats), REPS (5), ROUNDS (2: the whole
# comparison is repeated, interleaved, so that a busy moment on a shared machine hits both sides).
# Writes JSON lines and the report to $STRAIT_COMPARE_OUT (default $STRAIT_RESULTS_DIR/DATE-adamw,
# STRAIT_RESULTS_DIR defaulting to results/, bench/outdir.sh) and
# prints the report: params/s (median of REPS steps; the best round is reported), GB/s at
# 28 B/param, torch's best variant, the ratio strait / torch, and strait's share of the bound
# (the higher of the triad's and stream28's GB/s, / 28 B). Needs a built tree (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
threads=${1:-$(nproc)}
sizes=${SIZES:-16777216,67108864}
reps=${REPS:-5}
rounds=${ROUNDS:-2}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir adamw)}
python=/usr/bin/python3  # Debian's, which has python3-torch

[ -x "$build/bench/strait_adamw_bench" ] || cmake --build "$build" --target strait_adamw_bench
mkdir -p "$out"
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)), $threads threads, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# torch $($python -c 'import torch; print(torch.__version__)'), sizes $sizes, $reps reps, $rounds rounds"
} | tee "$out/report.md"

for round in $(seq 1 "$rounds"); do
  echo "# round $round, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$build/bench/strait_adamw_bench" -n "$sizes" -t "$threads" -r "$reps" | tee -a "$out/strait.jsonl"
  "$build/bench/strait_adamw_bench" -n "$sizes" -t "$threads" -r "$reps" --bf16 --no-bandwidth | tee -a "$out/strait_bf16.jsonl"
  "$python" "$root/bench/torch_adamw.py" -n "$sizes" -t "$threads" -r "$reps" | tee -a "$out/torch.jsonl"
done

"$python" - "$out" <<'PY' | tee -a "$out/report.md"
import json, sys
from collections import defaultdict
out = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open(f"{out}/{name}") if l.strip()]
strait = load("strait.jsonl")
bf16 = load("strait_bf16.jsonl")
torch = [r for r in load("torch.jsonl") if "error" not in r]
best = lambda rows: max(rows, key=lambda r: r["params_per_s"]) if rows else None
sizes = sorted({r["params"] for r in strait if r["kind"] == "strait_adamw"})
print()
print("| params | threads | strait Mparams/s | strait GB/s | +bf16 Mparams/s | triad GB/s | stream28 GB/s | bound Mparams/s | % of bound | torch variant | torch Mparams/s | strait / torch |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in sizes:
    s = best([r for r in strait if r["kind"] == "strait_adamw" and r["params"] == n])
    b = best([r for r in bf16 if r["params"] == n])
    tri = max((r for r in strait if r["kind"] == "triad" and r["elements"] == n * 28 // 12),
              key=lambda r: r["gb_per_s"])
    s28 = max((r for r in strait if r["kind"] == "stream28" and r["elements"] == n),
              key=lambda r: r["gb_per_s"])
    t = best([r for r in torch if r["params"] == n])
    bound = max(tri["gb_per_s"], s28["gb_per_s"]) * 1e9 / 28
    print(f"| {n} | {s['threads']} | {s['params_per_s']/1e6:.0f} | {s['gb_per_s']:.1f} | "
          f"{b['params_per_s']/1e6:.0f} | {tri['gb_per_s']:.1f} | {s28['gb_per_s']:.1f} | {bound/1e6:.0f} | "
          f"{100*s['params_per_s']/bound:.0f}% | {t['variant']} | {t['params_per_s']/1e6:.0f} | "
          f"{s['params_per_s']/t['params_per_s']:.2f}x |")
print()
print("torch variants (best round, Mparams/s):")
by = defaultdict(list)
for r in torch:
    by[(r["params"], r["variant"])].append(r)
for (n, v), rows in sorted(by.items()):
    print(f"- {n} {v}: {best(rows)['params_per_s']/1e6:.0f}")
for r in load("torch.jsonl"):
    if "error" in r:
        print(f"- {r['params']} {r['variant']}: not available ({r['error']})")
PY
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/report.md"
