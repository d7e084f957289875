#!/usr/bin/env bash
# Unlike ranks: 4 ranks of `strait train --stages 4` (12 layers, dim 128), rank 3 in a cgroup of
# its own with a smaller CPU share (cgroup v1 cpu controller: QUOTA_US of every 10 ms and
# cpu.shares SHARES). A traced even-split run gives each rank's speed (bench/rank_speed.py against
# the plan profile), `strait plan --rank-speed` chooses the plan and its split, then ROUNDS
# interleaved rounds run the even split and the planned plan; the report prints each run's median
# tokens/s (steps 3 on) and the ratio per round. Needs root (the cgroup).
#   sudo bench/unlike_ranks.sh [OUT_DIR]      (default $STRAIT_RESULTS_DIR/<date>-unlike-ranks,
#                                             bench/outdir.sh)
# Environment: QUOTA_US (2500: a quarter of a core), SHARES (256), ROUNDS (3), STEPS (12).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${1:-$(results_dir unlike-ranks)}
quota=${QUOTA_US:-2500}
shares=${SHARES:-256}
rounds=${ROUNDS:-3}
steps=${STEPS:-12}
mkdir -p "$out"
group=/sys/fs/cgroup/cpu/strait-unlike-$$
mkdir "$group"
trap 'rmdir "$group" 2>/dev/null || true' EXIT
echo 10000 > "$group/cpu.cfs_period_us"
echo "$quota" > "$group/cpu.cfs_quota_us"
echo "$shares" > "$group/cpu.shares"
# One rank: rank 3 moves itself into the group before it becomes strait train.
cat > "$out/rank.sh" << EOF
#!/bin/sh
if [ "\$RANK" = 3 ]; then echo \$\$ > $group/cgroup.procs; fi
exec $build/strait train "\$@"
EOF
chmod +x "$out/rank.sh"
model=(--layers 12 --dim 128 --heads 4 --ctx 128 --eval-sequences 16 --sample-bytes 8)
even=(--stages 4 --replicas 1 --schedule 1f1b --chunks 1 --microbatches 16 --microbatch-size 1)
train() {  # NAME [strait train arguments...]
  local name=$1
  shift
  "$build/strait" run -n 4 -- "$out/rank.sh" "${model[@]}" --metrics "$out/$name.jsonl" "$@" \
    > "$out/$name.out" 2>&1
}
profile=$out/profile.json
"$build/strait" plan -n 4 --model layers=12,dim=128,heads=4,ctx=128 --batch 16 \
  --profile "$profile" --top 1 > "$out/profile.out"
train probe "${even[@]}" --steps 10 --trace "$out/probe.trace.json"
speed=$(python3 "$root/bench/rank_speed.py" "$out/probe.trace.json" "$profile" 1 3,3,3,3)
echo "rank speeds (x the profile's compute): $speed"
"$build/strait" plan -n 4 --model layers=12,dim=128,heads=4,ctx=128 --batch 16 \
  --profile "$profile" --rank-speed "$speed" --top 400 --output "$out/plan.json" > "$out/plan.out"
grep -E '^  1  |4x1 1f1b M=16 b=1  ' "$out/plan.out"
for round in $(seq 1 "$rounds"); do
  echo "round $round, $(uptime)"
  train "even-$round" "${even[@]}" --steps "$steps"
  train "planned-$round" --plan "$out/plan.json" --steps "$steps"
done
python3 - "$out" "$rounds" << 'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def tokens_per_s(name):
    with open(f"{out}/{name}.jsonl", encoding="utf-8") as f:
        steps = [json.loads(line) for line in f]
    return statistics.median(s["tokens_per_s"] for s in steps
                             if s.get("type") == "step" and s["step"] >= 3)
even = [tokens_per_s(f"even-{r}") for r in range(1, rounds + 1)]
planned = [tokens_per_s(f"planned-{r}") for r in range(1, rounds + 1)]
print("even    tokens/s:", ", ".join(f"{x:.0f}" for x in even))
print("planned tokens/s:", ", ".join(f"{x:.0f}" for x in planned))
print("planned / even per round:", ", ".join(f"{b / a:.2f}" for a, b in zip(even, planned)))
EOF
