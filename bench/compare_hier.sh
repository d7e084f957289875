#!/usr/bin/env bash
# Hierarchical vs flat allreduce across the WAN testbed (tools/wan/testbed.h): 2 sites x 2 ranks
# joined by a tbf-shaped link, uncompressed and int8, then the stream demo: the same link with a
# per-flow limit (--flow-rate) and 1 vs 4 connections per inter-site peer (STRAIT_STREAMS).
# "flat" runs with STRAIT_SITES=0,0,0,0 (one site: the ring over all 4 ranks, or the compressed
# ring), "hierarchical" with the sites `wan run` sets (STRAIT_SITES=0,0,1,1).
# Link bounds (bytes one direction of a site's link must carry / rate): flat ring over 4 ranks,
# 2 of its edges cross: 2 (P-1)/P * SIZE = 1.5 SIZE each way; hierarchical: each of the 2 ranks
# of a site sends its half-vector shard's 2 (S-1)/S = 1 share across: SIZE each way.
# Needs root (namespaces, tc) and a built tree. Latency is not emulated (no netem on these
# kernels); the machine's cores are shared, so CPU-bound figures (codecs) are pessimistic.
#   sudo bench/compare_hier.sh [SIZE]          (default 64M: 16M f32)
# Environment: RATE (100mbit), FLOW_RATE (25mbit), ITERS (2), STREAMS_ONLY=1 (the stream demo only).
# The report is also written to $STRAIT_COMPARE_OUT/report.md (default
# $STRAIT_RESULTS_DIR/DATE-hier, bench/outdir.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir hier)}
mkdir -p "$out"
exec > >(tee "$out/report.md")  # printed, and kept with the run's data
size=${1:-64M}
rate=${RATE:-100mbit}
flow_rate=${FLOW_RATE:-25mbit}
iters=${ITERS:-2}
prefix=sth$$
strait=$build/strait

[ -x "$build/strait-bench" ] || "$root/scripts/build.sh"
trap '"$strait" wan down --prefix "$prefix" >/dev/null 2>&1 || true' EXIT
bytes=$(numfmt --from=iec "$size")
bits=$(awk -v r="$rate" 'BEGIN { match(r, /^[0-9.]+/); u = substr(r, RLENGTH + 1)
  m = u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : u == "kbit" ? 1e3 : 1; print substr(r, 1, RLENGTH) * m }')
bound_flat=$(awk -v b="$bytes" -v r="$bits" 'BEGIN { printf "%.4f", 1.5 * b * 8 / r }')
bound_hier=$(awk -v b="$bytes" -v r="$bits" 'BEGIN { printf "%.4f", b * 8 / r }')

# Seconds per call (out of place, max over ranks) of strait-bench's row. Environment for the
# ranks through SITES and STREAMS; arguments go to strait-bench.
strait_time() {
  env ${SITES:+STRAIT_SITES=$SITES} STRAIT_STREAMS="${STREAMS:-1}" \
    "$strait" wan run --prefix "$prefix" --ranks-per-site 2 -- "$build/strait-bench" allreduce \
    -b "$size" -e "$size" -n "$iters" -w 1 -c 0 "$@" | awk '/^ +[0-9]/ { printf "%.4f", $6 / 1e6 }'
}
row() {  # NAME SECONDS BOUND BASE: BOUND "-" for lossy rows
  awk -v n="$1" -v t="$2" -v b="$3" -v base="$4" 'BEGIN {
    share = b == "-" ? "-" : sprintf("%.1f%%", 100 * b / t)
    printf "| %s | %.3f | %s | %.2fx |\n", n, t, share, base / t }'
}

if [ -z "${STREAMS_ONLY:-}" ]; then
"$strait" wan up --prefix "$prefix" --rate "$rate" >/dev/null
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): allreduce f32 sum of $size, 2 sites x 2 ranks, $rate each way per site,"
echo "# $iters timed calls after 1 warm-up, time: max over ranks; link bound flat $bound_flat s, hierarchical $bound_hier s"
echo "| setting | time (s) | of its link bound | speed-up vs flat uncompressed |"
echo "|---|---:|---:|---:|"
flat=$(SITES=0,0,0,0 strait_time)
row "flat ring, uncompressed" "$flat" "$bound_flat" "$flat"
row "hierarchical, uncompressed" "$(strait_time)" "$bound_hier" "$flat"
row "flat compressed ring, int8" "$(SITES=0,0,0,0 strait_time --codec int8)" - "$flat"
row "hierarchical, int8 between sites" "$(strait_time --codec int8)" - "$flat"
"$strait" wan down --prefix "$prefix" >/dev/null
fi

# Streams: each TCP flow limited to flow_rate, the link to rate.
"$strait" wan up --prefix "$prefix" --rate "$rate" --flow-rate "$flow_rate" >/dev/null
echo
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): per-flow limit $flow_rate (htb class per TCP flow) under the $rate link;"
echo "# hierarchical, uncompressed, $size, 2 sites x 2 ranks, $iters timed calls after 1 warm-up"
echo "| setting | time (s) | of the link bound | speed-up vs 1 stream |"
echo "|---|---:|---:|---:|"
one=$(STREAMS=1 strait_time)
row "1 stream per inter-site peer" "$one" "$bound_hier" "$one"
four=$(STREAMS=4 strait_time)
row "4 streams per inter-site peer" "$four" "$bound_hier" "$one"
# Which flow classes carried the bytes that left site 0 (htb class 1:1xx per port-bucket pair).
echo
echo "# flow classes of site 0's shaper that sent more than 1 MB (class: bytes), after both runs:"
ip netns exec "$prefix-site0" tc -s class show dev wan0 |
  awk '/^class htb 1:1[0-9a-f][0-9a-f] / { c = $3 } /^ Sent/ && c != "" { if ($2 > 1e6) printf "%s: %s\n", c, $2; c = "" }'
