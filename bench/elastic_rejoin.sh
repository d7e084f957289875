#!/usr/bin/env bash
# Issue 16's kill-and-rejoin bar for elastic DiLoCo, on loopback: `strait train --elastic` with
# 3 whole-model replicas (--stages 1) and DiLoCo rounds of H steps; once the job has done KILL_AT
# steps, one rank (RANK=2) is killed from outside with SIGKILL; REJOIN_DELAY seconds later a
# replacement starts (`strait train --elastic --join` at the store the launcher printed) and is
# admitted at the next round boundary with a survivor's state. Draws rank 0's loss curve with the
# loss and the rejoin marked and the replicas present on a second axis (loss_rejoin.png), and
# writes report.md: when each event happened, the longest step (no rank may wait longer than
# STRAIT_TIMEOUT_S), the final held-out loss, and whether every process ended on the same weights.
#   bench/elastic_rejoin.sh [OUT_DIR]        (default bench/results/<date>-elastic-rejoin)
# Environment: STEPS (1500), H (10), KILL_AT (300), REJOIN_DELAY (30), STRAIT_TIMEOUT_S (60),
# TRAIN_ARGS (the model: small, about 20 ms a step on 2 shared cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
out=${1:-$root/bench/results/$(date -u +%Y-%m-%d)-elastic-rejoin}
steps=${STEPS:-1500}
h=${H:-10}
kill_at=${KILL_AT:-300}
delay=${REJOIN_DELAY:-30}
export STRAIT_TIMEOUT_S=${STRAIT_TIMEOUT_S:-60}
read -r -a model <<< "${TRAIN_ARGS:---layers 2 --dim 64 --heads 4 --ctx 64 --warmup 20 --microbatches 2 --microbatch-size 4}"
args=("${model[@]}" --stages 1 --replicas 3 --outer-steps "$h" --elastic --steps "$steps"
  --sample-bytes 0 --log-every 100 --eval-sequences 64)
mkdir -p "$out"
rm -f "$out/job.jsonl"
echo "== job: $build/strait train ${args[*]} --metrics $out/job.jsonl"
"$build/strait" train "${args[@]}" --metrics "$out/job.jsonl" > "$out/job.log" 2>&1 &
launcher=$!
done_steps() {
  if [ -f "$out/job.jsonl" ]; then grep -c '"type":"step"' "$out/job.jsonl" || true; else echo 0; fi
}
until [ "$(done_steps)" -ge "$kill_at" ]; do
  kill -0 "$launcher" 2> /dev/null || { echo "the job ended before step $kill_at" >&2; exit 1; }
  sleep 0.1
done
victim=
for p in $(pgrep -P "$launcher"); do
  if tr '\0' '\n' < "/proc/$p/environ" | grep -qx 'RANK=2'; then victim=$p; fi
done
[ -n "$victim" ] || { echo "rank 2 not found among the launcher's children" >&2; exit 1; }
kill -KILL "$victim"
killed_at=$(done_steps)
killed_s=$(date +%s.%N)
echo "== killed rank 2 (pid $victim) with SIGKILL after step $killed_at; rejoining in $delay s"
sleep "$delay"
port=$(grep -o 'MASTER_PORT=[0-9]*' "$out/job.log" | head -1 | cut -d= -f2)
joined_s=$(date +%s.%N)
joined_at=$(done_steps)
echo "== joiner (after step $joined_at): MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $build/strait train ${args[*]} --join"
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$build/strait" train "${args[@]}" --join \
  > "$out/joiner.log" 2>&1 &
joiner=$!
status=0
wait "$launcher" || status=$?
jstatus=0
wait "$joiner" || jstatus=$?
echo "== job exit $status, joiner exit $jstatus"
/usr/bin/python3 "$root/bench/elastic_rejoin_report.py" --metrics "$out/job.jsonl" \
  --job-log "$out/job.log" --joiner-log "$out/joiner.log" --killed-at "$killed_at" \
  --started-joiner-at "$joined_at" --delay "$(echo "$joined_s - $killed_s" | bc)" \
  --timeout "$STRAIT_TIMEOUT_S" --exit "$status" --joiner-exit "$jstatus" \
  --png "$out/loss_rejoin.png" | tee "$out/report.md"
