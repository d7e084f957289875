#!/usr/bin/env bash
# `strait train`'s default job with a shared secret, twice: alone, and while
# bench/hostile_store_client.py attacks its store (1000 connections with random frames, replayed
# handshakes, 100 silent connections held open). The losses must be bit-identical; the peak
# resident memory of the job's processes (max over ranks, rank 0 holding the store) is reported
# for both runs.
#   bench/hostile_store.sh [train options...]
# Environment: PORT (29571), STRAIT_BUILD_DIR.
# The report is also written to $STRAIT_COMPARE_OUT/report.md (default
# $STRAIT_RESULTS_DIR/DATE-hostile-store, bench/outdir.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir hostile-store)}
mkdir -p "$out"
exec > >(tee "$out/report.md")  # printed, and kept with the run's data
port=${PORT:-29571}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 32 /dev/urandom > "$dir/job.key"
chmod 600 "$dir/job.key"
export STRAIT_SECRET_FILE=$dir/job.key

job() {  # NAME [train options...]: runs the job under /usr/bin/time, metrics in $dir/NAME.jsonl
  local name=$1
  shift
  /usr/bin/time -f '%M' -o "$dir/$name.rss" "$build/strait" run -n 4 --master-port "$port" -- \
    "$build/strait" train --metrics "$dir/$name.jsonl" "$@" > "$dir/$name.log" 2>&1
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores"
job alone "${@}"
job attacked "${@}" &
pid=$!
python3 "$root/bench/hostile_store_client.py" --port "$port" --hold 20
wait "$pid"
losses() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "loss" in r: print(r.get("step"), repr(r["loss"]))' "$1"; }
losses "$dir/alone.jsonl" > "$dir/alone.loss"
losses "$dir/attacked.jsonl" > "$dir/attacked.loss"
n=$(wc -l < "$dir/alone.loss")
if cmp -s "$dir/alone.loss" "$dir/attacked.loss" && [ "$n" -gt 0 ]; then
  echo "losses: $n records, bit-identical with and without the attack"
else
  echo "losses DIFFER (or none recorded):"; diff "$dir/alone.loss" "$dir/attacked.loss" | head
fi
echo "peak RSS of the job's largest process: alone $(cat "$dir/alone.rss") KiB, attacked $(cat "$dir/attacked.rss") KiB"
grep -h "strait store" "$dir/attacked.log" | tail -3 || true
