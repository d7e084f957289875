#!/usr/bin/env bash
# Does DDP without a comm hook hide its gradient traffic behind backward? bench/ddp_overlap.py
# (2 ranks, an MLP whose gradients travel in several DDP buckets) times per step: compute alone,
# the same buckets' allreduces alone, DDP over strait with pending C++ Works (the default), DDP
# completed in Python (STRAIT_TORCH_CPP_WORK=python: the path without the compiled extension),
# over strait with finished ones (STRAIT_TORCH_CPP_WORK=finished: each bucket blocks backward),
# and DDP over Gloo; and against the bar 0.75 x (compute + comm). First on loopback
# (`strait run`), then, as root, across the WAN testbed (2 sites x 1 rank at RATE, `strait wan`),
# where the link, not the CPU, is the cost of communication: once with CPU compute, once with
# compute that takes time but no CPU (each layer's backward sleeps, as a GPU's would leave the
# cores free: on a small, busy machine the ranks' compute threads starve the communication
# threads, strait's and Gloo's alike). Each run writes the Chrome trace of one DDP step over
# strait (profiler spans strait::allreduce inside backward) and of one over Gloo (its own
# gloo:all_reduce spans), and prints their summaries.
#   bench/compare_ddp_overlap.sh            (sudo for the WAN part; WAN=0 skips it)
# Environment: MODEL (loopback: "--layers 8 --dim 1024 --batch 32 --bucket-mb 4", 8.4 M
# parameters, 32 MiB of gradients in 8 buckets), WAN_MODEL (WAN: "--layers 4 --dim 1024 --batch 512
# --bucket-mb 4", 16 MiB in 4 buckets), SLEEP_MODEL (WAN: "--layers 4 --dim 1024 --batch 4
# --bucket-mb 4 --sleep-ms 80"), RATE (500mbit: the WAN model's traffic then takes about
# its compute time), ROUNDS (5), STEPS (4 timed steps per round and configuration), WAN (1: run
# the WAN part when root), PARTS (which of "loopback wan_cpu wan_sleep" to run: all), OUT
# ($STRAIT_RESULTS_DIR/DATE-ddp-overlap, bench/outdir.sh). About 3
# minutes at the defaults (2.6 on a busy 2-core machine).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
model=${MODEL:---layers 8 --dim 1024 --batch 32 --bucket-mb 4}
wan_model=${WAN_MODEL:---layers 4 --dim 1024 --batch 512 --bucket-mb 4}
sleep_model=${SLEEP_MODEL:---layers 4 --dim 1024 --batch 4 --bucket-mb 4 --sleep-ms 80}
rate=${RATE:-500mbit}
rounds=${ROUNDS:-5}
steps=${STEPS:-4}
source "$root/bench/outdir.sh"
out=${OUT:-$(results_dir ddp-overlap)}
strait=$build/strait
prefix=sdo$$
mkdir -p "$out"
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} STRAIT_LIBRARY=$build/lib/libstrait.so
export PYTHONWARNINGS=ignore::UserWarning OMP_NUM_THREADS=1
bench=("$root/bench/ddp_overlap.py" --rounds "$rounds" --steps "$steps")
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg); raw output in $out"
parts=" ${PARTS:-loopback wan_cpu wan_sleep} "
if [[ $parts == *" loopback "* ]]; then
  echo "## loopback (strait run -n 2)"
  # shellcheck disable=SC2086  # MODEL is a list of flags
  "$strait" run -n 2 -- /usr/bin/python3 "${bench[@]}" $model --trace "$out/trace_loopback" \
    --json "$out/loopback.json" | tee "$out/loopback.txt"
fi
if [ "${WAN:-1}" != 0 ] && [[ $parts == *" wan_"* ]]; then
  if [ "$(id -u)" != 0 ]; then
    echo "## WAN: skipped (needs root for network namespaces and tc; run with sudo)"
    exit 0
  fi
  trap '"$strait" wan down --prefix "$prefix" >/dev/null 2>&1 || true' EXIT
  "$strait" wan up --prefix "$prefix" --rate "$rate" >/dev/null
  wan() {  # NAME FLAGS...
    local name=$1
    shift
    [[ $parts == *" $name "* ]] || return 0
    echo "## WAN testbed (2 sites x 1 rank, $rate each way), $name, load $(cut -d' ' -f1-3 /proc/loadavg)"
    GLOO_SOCKET_IFNAME=wan0 "$strait" wan run --prefix "$prefix" --ranks-per-site 1 -- \
      /usr/bin/python3 "${bench[@]}" "$@" --trace "$out/trace_$name" --json "$out/$name.json" |
      tee "$out/$name.txt"
  }
  # shellcheck disable=SC2086  # the models are lists of flags
  wan wan_cpu $wan_model
  # shellcheck disable=SC2086
  wan wan_sleep $sleep_model
fi
