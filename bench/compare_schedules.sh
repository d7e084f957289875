#!/usr/bin/env bash
# Pipeline schedules as they run: `strait train` with 2 stages x 1 replica, M = 8, under 1F1B,
# ZB-H1, GPipe, interleaved 1F1B (--chunks 2: 4 one-layer pipeline stages, two per rank) and ZB-V
# (two chunks per rank in a V), in ROUNDS rounds taken in turn so that load on a shared machine
# hits them alike.
# Each run writes --metrics and --trace; then `strait schedule --from-trace` sets the last step of
# the last round beside its plan (simulated with each stage's measured F, B, W) and draws it.
#
#   bench/compare_schedules.sh [OUT_DIR]     (default bench/results/schedules; the PNGs go there too)
#
# Environment: STRAIT (binary, default build/strait), STEPS (default 12), ROUNDS (default 2),
# SCHEDULES (default "1f1b zb-h1 gpipe interleaved zbv").
# Prints, per schedule and round, the median and the fastest step time over steps 3.. (the first
# two warm up), the tokens/s of the median step and the run's own tokens/s (all steps); on a
# shared machine the fastest is the least disturbed.
set -euo pipefail
BIN=${STRAIT:-build/strait}
OUT=${1:-bench/results/schedules}
STEPS=${STEPS:-12}
ROUNDS=${ROUNDS:-2}
SCHEDULES=${SCHEDULES:-1f1b zb-h1 gpipe interleaved zbv}
mkdir -p "$OUT"
common=(--stages 2 --replicas 1 --microbatches 8 --steps "$STEPS" --sample-bytes 0
        --eval-sequences 8 --blas-threads 1 --log-every 1000 --seed 7)
for round in $(seq 1 "$ROUNDS"); do
  for s in $SCHEDULES; do
    timeout 600 "$BIN" train "${common[@]}" --schedule "$s" --metrics "$OUT/$s-r$round.jsonl" \
      --trace "$OUT/$s-r$round.trace.json" > "$OUT/$s-r$round.log" 2>&1
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" $SCHEDULES <<'PY'
import json, statistics, sys
out, rounds, schedules = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'schedule':<11} {'round':>5} {'median step (ms)':>17} {'fastest (ms)':>13} "
      f"{'tok/s (median)':>15} {'tok/s (run)':>12} {'final loss':>11}")
for s in schedules:
    for r in range(1, rounds + 1):
        records = [json.loads(l) for l in open(f"{out}/{s}-r{r}.jsonl")]
        steps = [x for x in records if x["type"] == "step"]
        summary = [x for x in records if x["type"] == "summary"][-1]
        times = [x["seconds"] * 1e3 for x in steps[2:]]
        tokens = steps[0]["tokens_per_s"] * steps[0]["seconds"]  # tokens per step
        print(f"{s:<11} {r:>5} {statistics.median(times):>17.1f} {min(times):>13.1f} "
              f"{tokens / statistics.median(times) * 1e3:>15.0f} {summary['tokens_per_s']:>12.0f} "
              f"{steps[-1]['loss']:>11.6f}")
PY
for s in $SCHEDULES; do
  "$BIN" schedule --from-trace "$OUT/$s-r$ROUNDS.trace.json" \
    --png "$OUT/$s-planned-vs-measured.png"
done
