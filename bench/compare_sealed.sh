#!/usr/bin/env bash
# The cost of sealed links (comm/transport/sealed_transport.h): allreduce f32 with every link in
# the clear (STRAIT_ENCRYPT=off) and sealed (all), in alternating passes of one run, next to the
# AEAD's single-core seal and open throughput (XChaCha20-Poly1305, strait_micro_bench) measured in
# the same run. Loopback: 2 ranks on this machine (shared memory), 1 MiB and 64 MiB. With WAN=1
# (root: namespaces, tc) also the WAN testbed (2 sites x 1 rank, RATE each way): 64 MiB
# uncompressed and int8, clear against sealed.
#   bench/compare_sealed.sh            WAN=1 sudo -E bench/compare_sealed.sh
# Environment: ITERS (20 loopback, 3 WAN), PASSES (2), RATE (100mbit), STRAIT_BUILD_DIR.
# The report is also written to $STRAIT_COMPARE_OUT/report.md (default
# $STRAIT_RESULTS_DIR/DATE-sealed, bench/outdir.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir sealed)}
mkdir -p "$out"
exec > >(tee "$out/report.md")  # printed, and kept with the run's data
strait=$build/strait
bench=$build/strait-bench
passes=${PASSES:-2}
dir=$(mktemp -d)
prefix=sts$$
cleanup() {
  [ "${WAN:-0}" = 1 ] && "$strait" wan down --prefix "$prefix" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
key=$dir/job.key
head -c 32 /dev/urandom > "$key"
chmod 600 "$key"
export STRAIT_SECRET_FILE=$key

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores"
echo "## AEAD on one core (strait_micro_bench BM_SealedMessage/<bytes>/<0 seal, 1 open>)"
"$build/bench/strait_micro_bench" --benchmark_filter='BM_SealedMessage' 2>/dev/null |
  awk '/^BM_SealedMessage/ { print "    " $0 }'

# busbw (GB/s, out of place) of strait-bench's rows for each size.
loopback() {
  STRAIT_ENCRYPT=$1 "$strait" run -n 2 -- "$bench" allreduce -b 1M -e 64M -f 64 \
    -n "${ITERS:-20}" -w 3 -c 1 | awk -v m="$1" '/^ +[0-9]/ { printf "| %s | %s | %s | %s |\n", m, $1, $6, $8 }'
}
echo "## loopback, 2 ranks: allreduce f32 sum (strait-bench, check on)"
echo "| STRAIT_ENCRYPT | bytes | time (us) | busbw (GB/s) |"
echo "|---|---:|---:|---:|"
for ((p = 0; p < passes; ++p)); do
  loopback off
  loopback all
done

[ "${WAN:-0}" = 1 ] || exit 0
rate=${RATE:-100mbit}
"$strait" wan up --prefix "$prefix" --rate "$rate" >/dev/null
wan() {  # MODE [strait-bench args...]: seconds per call
  local mode=$1
  shift
  STRAIT_ENCRYPT=$mode "$strait" wan run --prefix "$prefix" -- "$bench" allreduce -b 64M -e 64M \
    -n "${WAN_ITERS:-3}" -w 1 -c 0 "$@" | awk '/^ +[0-9]/ { printf "%.3f", $6 / 1e6 }'
}
echo "## WAN testbed: 2 sites x 1 rank, $rate each way, allreduce f32 64 MiB (s per call)"
echo "| setting | clear (off) | sealed (all) | sealed / clear |"
echo "|---|---:|---:|---:|"
for codec in none int8; do
  args=()
  [ "$codec" = none ] || args=(--codec "$codec")
  for ((p = 0; p < passes; ++p)); do
    clear=$(wan off "${args[@]}")
    sealed=$(wan all "${args[@]}")
    awk -v c="$codec" -v a="$clear" -v b="$sealed" \
      'BEGIN { printf "| %s | %.3f | %.3f | %.3f |\n", c, a, b, b / a }'
  done
done
