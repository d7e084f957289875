#!/usr/bin/env bash
# Pipeline schedules as they run: `strait train` with STAGES stages x 1 replica, M = MICROBATCHES,
# under 1F1B, ZB-H1, GPipe, interleaved 1F1B (--chunks 2: two pipeline stages per rank), ZB-V and
# DualPipeV (two chunks per rank in a V; DualPipeV pairs F and B in OVERLAP_F_B), in ROUNDS rounds
# taken in turn so that load on a shared machine hits them alike.
# Each run writes --metrics and --trace; then `strait schedule --from-trace` sets each run's steps
# beside their plans (simulated with each stage's measured costs of every kind) and draws the last
# round's median step.
#
#   bench/compare_schedules.sh [OUT_DIR]     (default $STRAIT_RESULTS_DIR/DATE-schedules,
#                                            bench/outdir.sh; the PNGs go there too)
#
# Environment: STRAIT (binary, default build/strait), STEPS (default 12), ROUNDS (default 2),
# SCHEDULES (default "1f1b zb-h1 gpipe interleaved zbv dualpipev"), STAGES (default 2),
# MICROBATCHES (default 8), LAYERS (default 4; the chunked schedules need STAGES x 2).
# Prints, per schedule and round, the median and the fastest step time over steps 3.. (the first
# two warm up; on a shared machine the fastest is the least disturbed), the tokens/s of the median
# step and the run's own tokens/s (all steps), the median relative difference of the measured
# bubble from the plan priced with every measured cost (and from the plan priced with F, B, W
# alone), and ZB-H1's step over 1F1B's in each round. With zbv and dualpipev both run: each one's
# mean bubble measured and planned (its own trace's last step, priced as --from-trace does) and
# both planned with the same costs (`strait schedule --costs` of the ZB-V trace), per round.
# Each trace's full comparison is in
# OUT/<schedule>-r<round>.bubble.txt. The CPU seconds are every rank's user + system time for the
# whole run (start-up and evaluation included; /usr/bin/time).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${STRAIT:-build/strait}
source "$root/bench/outdir.sh"
OUT=${1:-$(results_dir schedules)}
STEPS=${STEPS:-12}
ROUNDS=${ROUNDS:-2}
SCHEDULES=${SCHEDULES:-1f1b zb-h1 gpipe interleaved zbv dualpipev}
STAGES=${STAGES:-2}
MICROBATCHES=${MICROBATCHES:-8}
LAYERS=${LAYERS:-4}
mkdir -p "$OUT"
common=(--stages "$STAGES" --replicas 1 --microbatches "$MICROBATCHES" --layers "$LAYERS"
        --steps "$STEPS" --sample-bytes 0
        --eval-sequences 8 --blas-threads 1 --log-every 1000 --seed 7)
for round in $(seq 1 "$ROUNDS"); do
  for s in $SCHEDULES; do
    /usr/bin/time -f '%U %S %e' -o "$OUT/$s-r$round.time" \
      timeout 600 "$BIN" train "${common[@]}" --schedule "$s" --metrics "$OUT/$s-r$round.jsonl" \
      --trace "$OUT/$s-r$round.trace.json" > "$OUT/$s-r$round.log" 2>&1
  done
done
for s in $SCHEDULES; do
  for round in $(seq 1 "$ROUNDS"); do
    "$BIN" schedule --from-trace "$OUT/$s-r$round.trace.json" > "$OUT/$s-r$round.bubble.txt"
  done
done
if [[ " $SCHEDULES " == *" zbv "* && " $SCHEDULES " == *" dualpipev "* ]]; then
  for round in $(seq 1 "$ROUNDS"); do
    for s in zbv dualpipev; do
      "$BIN" schedule --schedule "$s" --stages "$STAGES" --microbatches "$MICROBATCHES" \
        --costs "$OUT/zbv-r$round.trace.json" | tail -1 > "$OUT/$s-r$round.samecosts.txt"
    done
  done
fi
/usr/bin/python3 - "$OUT" "$ROUNDS" $SCHEDULES <<'PY'
import json, re, statistics, sys
out, rounds, schedules = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'schedule':<11} {'round':>5} {'median step (ms)':>17} {'fastest (ms)':>13} "
      f"{'tok/s (median)':>15} {'tok/s (run)':>12} {'final loss':>11} {'bubble vs plan':>15} "
      f"{'vs compute-only plan':>21} {'CPU s (all ranks)':>18}")
median = {}
cpu = {}
for s in schedules:
    for r in range(1, rounds + 1):
        records = [json.loads(l) for l in open(f"{out}/{s}-r{r}.jsonl")]
        steps = [x for x in records if x["type"] == "step"]
        summary = [x for x in records if x["type"] == "summary"][-1]
        times = [x["seconds"] * 1e3 for x in steps[2:]]
        median[s, r] = statistics.median(times)
        tokens = steps[0]["tokens_per_s"] * steps[0]["seconds"]  # tokens per step
        text = open(f"{out}/{s}-r{r}.bubble.txt").read()
        m = re.search(r"median relative difference over steps \S+: (\S+)% \(compute-only plan: (\S+)%\)", text)
        full, compute = (m.group(1) + "%", m.group(2) + "%") if m else ("-", "-")
        user, system, _ = open(f"{out}/{s}-r{r}.time").read().split()[-3:]
        cpu[s, r] = float(user) + float(system)
        print(f"{s:<11} {r:>5} {median[s, r]:>17.1f} {min(times):>13.1f} "
              f"{tokens / median[s, r] * 1e3:>15.0f} {summary['tokens_per_s']:>12.0f} "
              f"{steps[-1]['loss']:>11.6f} {full:>15} {compute:>21} {cpu[s, r]:>18.1f}")
if "zbv" in schedules and "dualpipev" in schedules:
    def mean_bubbles(s, r):  # (measured, planned) of the trace's last step, mean over ranks
        m = re.search(r"^mean\s+(\S+)\s+(\S+)", open(f"{out}/{s}-r{r}.bubble.txt").read(), re.M)
        return float(m.group(1)), float(m.group(2))
    for r in range(1, rounds + 1):
        (zm, zp), (dm, dp) = mean_bubbles("zbv", r), mean_bubbles("dualpipev", r)
        same = {s: float(open(f"{out}/{s}-r{r}.samecosts.txt").read().split()[4])
                for s in ("zbv", "dualpipev")}
        print(f"round {r}: bubble measured / planned (own trace): zbv {zm:.3f} / {zp:.3f}, "
              f"dualpipev {dm:.3f} / {dp:.3f} ({100 * (dm - dp) / dp:+.1f}%); planned with "
              f"zbv's mean costs: zbv {same['zbv']:.3f}, dualpipev {same['dualpipev']:.3f}")
if "zb-h1" in schedules and "1f1b" in schedules:
    print("ZB-H1 / 1F1B median step per round: " +
          ", ".join(f"{median['zb-h1', r] / median['1f1b', r]:.3f}" for r in range(1, rounds + 1)))
    print("ZB-H1 / 1F1B CPU time of the whole run per round: " +
          ", ".join(f"{cpu['zb-h1', r] / cpu['1f1b', r]:.3f}" for r in range(1, rounds + 1)))
PY
# The charts show the last round's median step (by its traced makespan, from the third step on),
# not an outlier a loaded machine may have stalled.
for s in $SCHEDULES; do
  step=$(/usr/bin/python3 - "$OUT/$s-r$ROUNDS.trace.json" <<'PY'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
span = {}
for e in events:
    lo, hi = span.get(e["args"]["step"], (float("inf"), 0))
    span[e["args"]["step"]] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
steps = sorted(span)[2:] or sorted(span)
print(sorted(steps, key=lambda k: span[k][1] - span[k][0])[len(steps) // 2])
PY
)
  "$BIN" schedule --from-trace "$OUT/$s-r$ROUNDS.trace.json" --step "$step" \
    --png "$OUT/$s-planned-vs-measured.png" > "$OUT/$s-planned-vs-measured.txt"
done
