#!/usr/bin/env bash
# strait vs torch.distributed (Gloo) vs Open MPI: f32 sum allreduce, 8 B .. 256 MiB, in one run,
# with one core's memcpy of each size from 128 KiB up (bench/memcpy_bound.py) as the local bound.
#   bench/compare_allreduce.sh [RANKS...]      (default: 2 4)
# Every peer is timed the same way (WARMUP calls, a barrier, ITERS timed calls, mean per call,
# maximum over ranks; nccl-tests' algbw and busbw) and checks its sums. Small sizes (8 B .. 64 KiB)
# get more iterations than large ones (128 KiB .. 16 MiB), and those more than huge ones
# (32 MiB .. 256 MiB), so that the run stays within minutes. Writes each peer's JSON and log, the
# report (report.md, also printed) and busbw.png (busbw against size, one line per peer, a panel per
# rank count: tools/plot/plot_busbw.py) to $STRAIT_COMPARE_OUT (default
# $STRAIT_RESULTS_DIR/DATE-allreduce, STRAIT_RESULTS_DIR defaulting to results/:
# bench/outdir.sh; data only: the Open MPI program is built in the build folder).
# bench/plots.sh redraws the plot from the folder.
# Needs the peers (bench/setup-peers.sh installs them) and a built tree (scripts/build.sh).
# Environment: SMALL_ITERS (200), LARGE_ITERS (10), HUGE_ITERS (3), MAX_BYTES (256M).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
ranks=("$@")
[ ${#ranks[@]} -eq 0 ] && ranks=(2 4)
small_iters=${SMALL_ITERS:-200}
large_iters=${LARGE_ITERS:-10}
huge_iters=${HUGE_ITERS:-3}
max_bytes=${MAX_BYTES:-256M}
max=$(numfmt --from=iec "$max_bytes")
large_max=$(( max < (16 << 20) ? max : (16 << 20) ))
source "$root/bench/outdir.sh"
out=${STRAIT_COMPARE_OUT:-$(results_dir allreduce)}

"$root/bench/setup-peers.sh"
[ -x "$build/strait-bench" ] || "$root/scripts/build.sh"
mkdir -p "$out" "$build/bench-peers"
mpi_bin=$build/bench-peers/mpi_allreduce  # a build output: never in the results folder
mpicc -O2 -o "$mpi_bin" "$root/bench/mpi_allreduce.c"
python=/usr/bin/python3  # Debian's, which has python3-torch

{
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $(mpirun --version 2>&1 | head -1); torch $($python -c 'import torch; print(torch.__version__)')"
} | tee "$out/report.md"

# PEER small|large|huge RANKS: runs one peer on one size range.
run_peer() {
  local peer=$1 range=$2 n=$3 args
  case $range in
    small) args=(-b 8 -e 64K -f 2 -n "$small_iters" -w 20) ;;
    large) args=(-b 128K -e "$large_max" -f 2 -n "$large_iters" -w 2) ;;
    huge) args=(-b 32M -e "$max_bytes" -f 2 -n "$huge_iters" -w 1) ;;
  esac
  local json="$out/$peer-$n-$range.json" log="$out/$peer-$n-$range.log"
  case $peer in
    strait) "$build/strait" run -n "$n" -- "$build/strait-bench" allreduce "${args[@]}" \
              -d f32 -o sum -c 1 --json "$json" >"$log" 2>&1 ;;
    gloo) OMP_NUM_THREADS=1 "$python" "$root/bench/gloo_allreduce.py" -np "$n" "${args[@]}" \
              --json "$json" >"$log" 2>&1 ;;
    memcpy) "$python" "$root/bench/memcpy_bound.py" "${args[@]}" --json "$json" >"$log" 2>&1 ;;
    mpi) mpirun --allow-run-as-root --oversubscribe -np "$n" "$mpi_bin" "${args[@]}" \
              --json "$json" >"$log" 2>&1 ;;
  esac || { echo "compare: $peer with $n ranks ($range sizes) failed; its output:" >&2; cat "$log" >&2; exit 1; }
}

for n in "${ranks[@]}"; do
  ranges=(small large)
  [ "$max" -ge $((32 << 20)) ] && ranges+=(huge)
  for range in "${ranges[@]}"; do
    peers=(strait gloo mpi)
    [ "$range" = small ] || peers+=(memcpy)
    for peer in "${peers[@]}"; do
      echo "# running $peer, $n ranks, $range sizes" >&2
      run_peer "$peer" "$range" "$n"
    done
  done
  files() {  # PEER: its JSON files for this rank count, comma-separated
    local list="" r
    for r in "${ranges[@]}"; do list+="${list:+,}$out/$1-$n-$r.json"; done
    echo "$list"
  }
  memcpy_files=""
  for r in "${ranges[@]}"; do
    [ "$r" = small ] || memcpy_files+="${memcpy_files:+,}$out/memcpy-$n-$r.json"
  done
  "$python" "$root/bench/compare_report.py" "$n" "$(files strait)" "$(files gloo)" "$(files mpi)" \
    $memcpy_files \
    | tee -a "$out/report.md"
done
"$python" "$root/tools/plot/plot_busbw.py" --out "$out/busbw.png" \
  --title "allreduce (f32 sum), $(nproc) CPUs, $(date -u +%Y-%m-%d), load $(cut -d' ' -f1 /proc/loadavg)" \
  "$out" >&2
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); files in $out (busbw.png: the plot)" \
  | tee -a "$out/report.md"
