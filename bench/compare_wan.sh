#!/usr/bin/env bash
# Allreduce across the WAN testbed (tools/wan/testbed.h: 2 sites x 1 rank joined by a tbf-shaped
# link): strait uncompressed and with each codec, and torch.distributed's Gloo over the same link,
# in one run. Prints each setting's time per call, how much of the link's bound the uncompressed
# runs reach (bytes that must cross one way / link rate; a 2-rank ring sends SIZE each way) and
# each codec's speed-up over uncompressed strait. Needs root (namespaces, tc), the peers
# (bench/setup-peers.sh) and a built tree. Latency is not emulated (no netem on these kernels).
#   sudo bench/compare_wan.sh [SIZE]          (default 64M: 16M f32)
# Environment: RATE (100mbit), ITERS (3),
# CODECS (bf16 int8 int4 onebit topk:fraction=0.01 powersgd:rank=4).
# The report is also written to $STRAIT_COMPARE_OUT/report.md (default
# $STRAIT_RESULTS_DIR/DATE-wan, bench/outdir.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir wan)}
mkdir -p "$out"
exec > >(tee "$out/report.md")  # printed, and kept with the run's data
size=${1:-64M}
rate=${RATE:-100mbit}
iters=${ITERS:-3}
read -r -a codecs <<< "${CODECS:-bf16 int8 int4 onebit topk:fraction=0.01 powersgd:rank=4}"
prefix=stw$$
strait=$build/strait

"$root/bench/setup-peers.sh"
[ -x "$build/strait-bench" ] || "$root/scripts/build.sh"
trap '"$strait" wan down --prefix "$prefix" >/dev/null 2>&1 || true' EXIT
"$strait" wan up --prefix "$prefix" --rate "$rate" >/dev/null
bytes=$(numfmt --from=iec "$size")
bits=$(awk -v r="$rate" 'BEGIN { match(r, /^[0-9.]+/); u = substr(r, RLENGTH + 1)
  m = u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : u == "kbit" ? 1e3 : 1; print substr(r, 1, RLENGTH) * m }')
bound=$(awk -v b="$bytes" -v r="$bits" 'BEGIN { printf "%.4f", b * 8 / r }')
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): allreduce f32 sum of $size, 2 sites x 1 rank, $rate each way per site,"
echo "# $iters timed calls after 1 warm-up, time: max over ranks; link bound $bound s (no latency emulation)"
echo "| setting | time (s) | of the link bound | speed-up vs uncompressed strait |"
echo "|---|---:|---:|---:|"

# Seconds per call (out of place) of strait-bench's row, or gloo_allreduce.py's.
strait_time() {
  "$strait" wan run --prefix "$prefix" -- "$build/strait-bench" allreduce -b "$size" -e "$size" \
    -n "$iters" -w 1 -c 0 "$@" | awk '/^ +[0-9]/ { printf "%.4f", $6 / 1e6 }'
}
base=$(strait_time)
row() {  # NAME SECONDS [lossy]: the bound is for the uncompressed bytes, so only those rows get it
  awk -v n="$1" -v t="$2" -v b="$bound" -v base="$base" -v lossy="${3:-}" 'BEGIN {
    share = lossy == "" ? sprintf("%.1f%%", 100 * b / t) : "-"
    printf "| %s | %.3f | %s | %.2fx |\n", n, t, share, base / t }'
}
row "strait, uncompressed" "$base"
gloo=$(GLOO_SOCKET_IFNAME=wan0 "$strait" wan run --prefix "$prefix" -- /usr/bin/python3 \
  "$root/bench/gloo_allreduce.py" --launched -b "$size" -e "$size" -n "$iters" -w 1 |
  awk '/^ +[0-9]/ { printf "%.4f", $3 / 1e6 }')
row "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') gloo" "$gloo"
for c in "${codecs[@]}"; do
  row "strait, $c" "$(strait_time --codec "$c")" lossy
done
