#!/usr/bin/env bash
# Issue 16's kill-and-rejoin bar for elastic DiLoCo: `strait train --elastic` with replicas of
# STAGES pipeline stages (default 1: whole-model replicas) and DiLoCo rounds of H steps; once the
# job has done KILL_AT steps, one rank (VICTIM) is killed from outside with SIGKILL (its replica is
# dropped whole); REJOIN_DELAY seconds later a replacement starts (STAGES processes of
# `strait train --elastic --join` at the job's store, admitted together) and is admitted at the
# next round boundary with the survivors' state, each stage's from a survivor of that stage. Draws
# rank 0's loss curve with the loss and the rejoin marked and the replicas computing on a second
# axis (loss_rejoin.png), and writes report.md: when each event happened, the longest step and the
# joiners' wait (no rank may wait longer than STRAIT_TIMEOUT_S), the final held-out loss, and
# whether every process ended on the same weights (per stage).
#
# Two places to run it:
#   loopback (default): 3 replicas on 127.0.0.1 (`strait train --elastic` is its own launcher),
#     a small model (about 20 ms a step on 2 shared cores).
#   WAN=1 (needs root): the WAN testbed (`strait wan`, tools/wan/testbed.h), one site per replica
#     (its STAGES ranks in it) joined by tbf-shaped links at RATE, the reference transformer
#     (`strait train`'s default model, one BLAS thread per rank); `strait wan run --elastic` hosts
#     the store in site 0, the replacement starts in the victim's site (`strait wan exec`); with
#     2 replicas the survivors of site 0 train alone (--min-replicas 1) until it is admitted. Also
#     counts the bytes across the link: from the shapers' counters (`tc -s qdisc`, sampled every
#     second into link.csv) and from strait's own figures (the outer averages, the state sent).
#   bench/elastic_rejoin.sh [OUT_DIR]        (default $STRAIT_RESULTS_DIR/<date>-elastic-rejoin
#                                            or -elastic-rejoin-wan, bench/outdir.sh)
# Environment: STEPS (1500; WAN 300), H (10), KILL_AT (300; WAN 100), REJOIN_DELAY (30),
# STRAIT_TIMEOUT_S (60), REPLICAS (3; WAN 2), STAGES (1), VICTIM (the last rank: the last
# replica's last stage), TRAIN_ARGS (the model, as above); WAN only: RATE (100mbit), PREFIX (erj),
# SUBNET (10.79.5), PORT (29741).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
wan=${WAN:-0}
if [ "$wan" = 1 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "WAN=1 needs root (the testbed's namespaces and tc)" >&2; exit 1; }
  out=${1:-$(results_dir elastic-rejoin-wan)}
  steps=${STEPS:-300}
  kill_at=${KILL_AT:-100}
  replicas=${REPLICAS:-2}
  default_model="--blas-threads 1"  # the default model; one thread per rank (2 cores)
else
  out=${1:-$(results_dir elastic-rejoin)}
  steps=${STEPS:-1500}
  kill_at=${KILL_AT:-300}
  replicas=${REPLICAS:-3}
  default_model="--layers 2 --dim 64 --heads 4 --ctx 64 --warmup 20 --microbatches 2 --microbatch-size 4"
fi
stages=${STAGES:-1}
h=${H:-10}
delay=${REJOIN_DELAY:-30}
victim=${VICTIM:-$((replicas * stages - 1))}
export STRAIT_TIMEOUT_S=${STRAIT_TIMEOUT_S:-60}
read -r -a model <<< "${TRAIN_ARGS-$default_model}"
args=("${model[@]}" --stages "$stages" --replicas "$replicas" --outer-steps "$h" --elastic
  --min-replicas 1 --steps "$steps" --sample-bytes 0 --log-every 100 --eval-sequences 64)
mkdir -p "$out"
rm -f "$out"/job.jsonl "$out"/link.csv "$out"/joiner*.log
joiners=()
joiner_logs=()
for ((k = 0; k < stages; k++)); do
  joiner_logs+=("$out/joiner$([ "$stages" = 1 ] || echo "-$k").log")
done

if [ "$wan" = 1 ]; then
  prefix=${PREFIX:-erj}
  port=${PORT:-29741}
  rate=${RATE:-100mbit}
  "$build/strait" wan up --prefix "$prefix" --sites "$replicas" --rate "$rate" \
    --subnet "${SUBNET:-10.79.5}"
  # On any exit: stop what still runs in the sites, then remove them.
  trap 'for p in ${launcher:-} ${joiners[@]:-}; do kill "$p" 2> /dev/null || true; done
    wait 2> /dev/null || true
    "$build/strait" wan down --prefix "$prefix" > /dev/null' EXIT
  launch=("$build/strait" wan run --prefix "$prefix" --master-port "$port" --ranks-per-site
    "$stages" --elastic -- "$build/strait" train)
  join=("$build/strait" wan exec --prefix "$prefix" --site "$((victim / stages))" --master-port
    "$port" -- "$build/strait" train)
  link_bytes() {  # bytes that left every site through its shaper (each crossed the link once)
    local total=0 i n
    for ((i = 0; i < replicas; i++)); do
      n=$(tc -n "$prefix-site$i" -s qdisc show dev wan0 | grep -o 'Sent [0-9]*' | head -1 | cut -d' ' -f2)
      total=$((total + n))
    done
    echo "$total"
  }
else
  launch=("$build/strait" train)
fi

echo "== job: ${launch[*]} ${args[*]} --metrics $out/job.jsonl"
"${launch[@]}" "${args[@]}" --metrics "$out/job.jsonl" > "$out/job.log" 2>&1 &
launcher=$!
done_steps() {
  if [ -f "$out/job.jsonl" ]; then grep -c '"type":"step"' "$out/job.jsonl" || true; else echo 0; fi
}
sampler=
if [ "$wan" = 1 ]; then
  echo "seconds,steps,link_bytes" > "$out/link.csv"
  t0=$(date +%s.%N)
  (while kill -0 "$launcher" 2> /dev/null; do
    echo "$(echo "$(date +%s.%N) - $t0" | bc -l | sed 's/^\./0./'),$(done_steps),$(link_bytes)" \
      >> "$out/link.csv"
    sleep 1
  done) &
  sampler=$!
fi
until [ "$(done_steps)" -ge "$kill_at" ]; do
  kill -0 "$launcher" 2> /dev/null || { echo "the job ended before step $kill_at" >&2; exit 1; }
  sleep 0.1
done
descendants() {  # every process under $1
  local c
  for c in $(pgrep -P "$1"); do
    echo "$c"
    descendants "$c"
  done
}
pid=
for p in $(descendants "$launcher"); do
  if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "RANK=$victim"; then pid=$p; fi
done
[ -n "$pid" ] || { echo "rank $victim not found among the launcher's processes" >&2; exit 1; }
kill -KILL "$pid"
killed_at=$(done_steps)
killed_s=$(date +%s.%N)
echo "== killed rank $victim (pid $pid) with SIGKILL after step $killed_at; rejoining in $delay s"
sleep "$delay"
port=$(grep -o 'MASTER_PORT=[0-9]*' "$out/job.log" | head -1 | cut -d= -f2)
[ "$wan" = 1 ] || join=(env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$build/strait" train)
joined_s=$(date +%s.%N)
joined_at=$(done_steps)
echo "== $stages joiner(s) (after step $joined_at): ${join[*]} ${args[*]} --join"
for log in "${joiner_logs[@]}"; do
  "${join[@]}" "${args[@]}" --join > "$log" 2>&1 &
  joiners+=($!)
done
# How long the joiners wait to be admitted (each prints its "joined as replica" line then).
admitted_s=
while :; do
  n=0
  for log in "${joiner_logs[@]}"; do grep -qs 'joined as replica' "$log" && n=$((n + 1)); done
  if [ "$n" = "$stages" ]; then
    admitted_s=$(date +%s.%N)
    break
  fi
  alive=0
  for p in "${joiners[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
  [ "$alive" = 1 ] || break
  sleep 0.1
done
status=0
wait "$launcher" || status=$?
jstatus=0
for p in "${joiners[@]}"; do
  s=0
  wait "$p" || s=$?
  [ "$jstatus" != 0 ] || jstatus=$s
done
[ -z "$sampler" ] || wait "$sampler" || true
echo "== job exit $status, joiners' exit $jstatus"
report=(--metrics "$out/job.jsonl" --job-log "$out/job.log" --joiner-log "${joiner_logs[@]}"
  --replicas "$replicas" --stages "$stages" --victim "$victim" --killed-at "$killed_at"
  --started-joiner-at "$joined_at" --delay "$(echo "$joined_s - $killed_s" | bc)"
  --timeout "$STRAIT_TIMEOUT_S" --exit "$status" --joiner-exit "$jstatus"
  --png "$out/loss_rejoin.png")
[ -z "$admitted_s" ] || report+=(--joiner-waited "$(echo "$admitted_s - $joined_s" | bc)")
if [ "$wan" = 1 ]; then
  report+=(--link-csv "$out/link.csv" --link-bytes "$(link_bytes)" --rate "$rate")
  for ((i = 0; i < replicas; i++)); do
    echo "site $i, leaving the site (wan0):"
    tc -n "$prefix-site$i" -s qdisc show dev wan0
  done > "$out/shapers.txt"
fi
# The report's arguments, paths relative to the folder: bench/plots.sh redraws the plot from them.
printf '%s\n' "${report[@]#"$out"/}" > "$out/report.args"
/usr/bin/python3 "$root/bench/elastic_rejoin_report.py" "${report[@]}" | tee "$out/report.md"
