#!/usr/bin/env bash
# strait's offload I/O engines vs fio (ioengine=io_uring, direct=1) on the same file, same run.
#   bench/compare_offload_io.sh                    (defaults below)
#   DIR=/nvme BLOCKS="1M" DEPTHS="32" REPEAT=5 bench/compare_offload_io.sh
# One file of SIZE in a fresh folder under DIR is laid out once by fio (sequential O_DIRECT
# writes) and then used by both: for every repetition, operation (read, write), block size and
# queue depth, `strait-bench offload` moves BYTES through io_uring with plain and with registered
# buffers and files, then fio moves the same BYTES from offset 0 with the same block size and
# depth, plain and with fixedbufs=1 registerfiles=1. Points alternate between strait and fio (strait
# first in odd repetitions, fio first in even ones) so that a change in load or in the disk's
# state hits both. The pread/pwrite fallback and
# CPU AdamW are measured once at the end (posix engine, same grid). O_DIRECT bypasses the page
# cache for strait and fio alike; the posix engine drops the file's pages before reading.
# The report (bench/offload_report.py) shows the median GB/s of each point over the repetitions
# and strait/fio; the bar is io_uring at 1 MiB, depth 32: at least 0.9x fio.
# The folder and file are removed at exit, also on Ctrl-C. Output: JSON, logs and report.md in
# $STRAIT_COMPARE_OUT (default $STRAIT_RESULTS_DIR/DATE-offload-io, bench/outdir.sh).
# Environment: DIR (/var/tmp), SIZE (4G), BYTES (1G), BLOCKS ("64K 256K 1M 8M"),
# DEPTHS ("1 8 32 128"), REPEAT (3), POSIX (1: also measure the fallback), POSIX_BYTES (256M:
# the buffered fallback runs at a fraction of the disk's speed), ADAMW_PARAMS (16M).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
dir=${DIR:-/var/tmp}
size=${SIZE:-4G}
bytes=${BYTES:-1G}
blocks=${BLOCKS:-64K 256K 1M 8M}
depths=${DEPTHS:-1 8 32 128}
repeat=${REPEAT:-3}
posix=${POSIX:-1}
posix_bytes=${POSIX_BYTES:-256M}
adamw_params=${ADAMW_PARAMS:-16M}
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir offload-io)}

"$root/bench/setup-io.sh"
[ -x "$build/strait-bench" ] || "$root/scripts/build.sh"
[ -d "$dir" ] || { echo "compare: DIR=$dir is not a directory" >&2; exit 2; }
need=$(numfmt --from=iec "$size")
avail=$(( $(stat -f -c '%a * %S' "$dir") ))
if [ "$avail" -lt $(( need + (1 << 30) )) ]; then
  echo "compare: $dir has $(numfmt --to=iec "$avail") free; SIZE=$size needs it plus 1 GiB" >&2
  exit 2
fi
work=$(mktemp -d "$dir/strait-compare-io.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'cleanup; trap - INT; kill -INT $$' INT
trap 'cleanup; exit 143' TERM
file=$work/io.dat
mkdir -p "$out"

fstype=$(df --output=fstype "$dir" | tail -1)
dev=$(df --output=source "$dir" | tail -1)
{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $(fio --version); $dir is $fstype on $dev; file $size, $bytes per point, $repeat repetitions"
} | tee "$out/report.md"

echo "# laying out $file ($size) with fio" >&2
fio --name=layout --filename="$file" --size="$size" --rw=write --bs=8M --iodepth=8 \
  --ioengine=io_uring --direct=1 --output="$out/layout.log" >/dev/null

# FIO_JSON OP BLOCK DEPTH FIXED: one fio point, the same shape as strait-bench's.
run_fio() {
  local json=$1 op=$2 bs=$3 qd=$4 fixed=$5 extra=()
  [ "$fixed" = 1 ] && extra=(--fixedbufs=1 --registerfiles=1)
  fio --name="$op-$bs-$qd" --filename="$file" --size="$size" --io_size="$bytes" --rw="$op" \
    --bs="$bs" --iodepth="$qd" --ioengine=io_uring --direct=1 "${extra[@]}" \
    --output-format=json --output="$json" >/dev/null
}

# TAG OP BLOCK DEPTH: strait's io_uring engine, plain and with registered buffers and files.
run_strait() {
  "$build/strait-bench" offload --file "$file" --engines uring,uring-fixed --ops "$2" \
    -b "$3" -e "$3" --qd "$4" --bytes "$bytes" --adamw-params 0 \
    --json "$out/strait-$1.json" >"$out/strait-$1.log" 2>&1 ||
    { cat "$out/strait-$1.log" >&2; exit 1; }
}

for r in $(seq 1 "$repeat"); do
  for op in read write; do
    for bs in $blocks; do
      for qd in $depths; do
        tag="r$r-$op-$bs-$qd"
        echo "# $tag" >&2
        # Odd repetitions run strait first, even ones fio first: neither always follows the other.
        if [ $((r % 2)) -eq 1 ]; then
          run_strait "$tag" "$op" "$bs" "$qd"
          run_fio "$out/fio-$tag.json" "$op" "$bs" "$qd" 0
          run_fio "$out/fio-fixed-$tag.json" "$op" "$bs" "$qd" 1
        else
          run_fio "$out/fio-fixed-$tag.json" "$op" "$bs" "$qd" 1
          run_fio "$out/fio-$tag.json" "$op" "$bs" "$qd" 0
          run_strait "$tag" "$op" "$bs" "$qd"
        fi
      done
    done
  done
done

engines=""
[ "$posix" = 1 ] && engines=posix
echo "# posix fallback and CPU AdamW" >&2
"$build/strait-bench" offload --file "$file" --engines "$engines" --ops read,write \
  --blocks "$(echo "$blocks" | tr ' ' ',')" --qd "$(echo "$depths" | tr ' ' ',')" --bytes "$posix_bytes" \
  --adamw-params "$adamw_params" --json "$out/strait-posix.json" >"$out/strait-posix.log" 2>&1 ||
  { cat "$out/strait-posix.log" >&2; exit 1; }

# The report exits 1 when the bar is not met: say so after the closing line, not instead of it.
status=0
python3 "$root/bench/offload_report.py" "$out" | tee -a "$out/report.md" || status=$?
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); files in $out" | tee -a "$out/report.md"
exit "$status"
