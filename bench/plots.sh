#!/usr/bin/env bash
# Redraws every plot of a results folder from its raw data: the benchmarks write data (JSON, JSON
# lines, traces) to a folder outside the tree (bench/outdir.sh), and no plot is committed.
#   bench/plots.sh RESULTS_DIR [OUT_DIR]
# RESULTS_DIR is one run's folder or a folder of them (e.g. results/); each folder under it is
# recognised by its files:
#   allreduce    strait-N-small.json ... (compare_allreduce.sh) -> busbw.png
#                (tools/plot/plot_busbw.py)
#   convergence  none.jsonl + one .jsonl per codec (convergence.sh) -> loss_curves.png
#                (tools/plot/plot_convergence.py; no tolerances: nothing is judged)
#   DiLoCo       data-parallel.jsonl + diloco-*.jsonl (diloco.sh) -> loss_bytes.png
#                (bench/diloco_plot.py; the -seedN runs left out, as diloco.sh does)
#   frontier     data-parallel-seedN.jsonl + other *-seedN.jsonl (diloco.sh SWEEP=frontier)
#                -> loss_bytes_frontier.png (bench/diloco_frontier.py; over seeds)
#   elastic      report.args (elastic_rejoin.sh)                 -> loss_rejoin.png
#                (bench/elastic_rejoin_report.py)
#   schedules    NAME.png.json (`strait schedule --png`, compare_schedules.sh) -> NAME.png
#                (tools/plot/plot_schedule.py)
# The PNGs go next to the data, or with OUT_DIR to OUT_DIR/<the folder's path under RESULTS_DIR>.
# Prints each PNG written; exits 1 when a plot failed, 2 when no folder held anything to plot.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ ! -d "$1" ]; then
  echo "usage: bench/plots.sh RESULTS_DIR [OUT_DIR]" >&2
  exit 2
fi
results=$(cd "$1" && pwd)
out_root=${2:-$results}
python=/usr/bin/python3
"$python" -c 'import matplotlib' 2>/dev/null ||
  { echo "plots: no matplotlib (scripts/setup.sh installs python3-matplotlib)" >&2; exit 2; }

drawn=0 failed=0
draw() {  # PNG COMMAND...: runs COMMAND (which writes PNG), counts and reports it
  local png=$1
  shift
  mkdir -p "$(dirname "$png")"
  if "$@" >/dev/null; then
    echo "$png"
    drawn=$((drawn + 1))
  else
    echo "plots: failed: $*" >&2
    failed=$((failed + 1))
  fi
}
in_dir() { (cd "$1" && shift && "$@"); }  # DIR COMMAND...

while IFS= read -r -d '' dir; do
  rel=${dir#"$results"}
  out=$out_root${rel}
  shopt -s nullglob
  busbw=("$dir"/strait-[0-9]*-{small,large,huge}.json)
  if [ ${#busbw[@]} -gt 0 ]; then
    draw "$out/busbw.png" "$python" "$root/tools/plot/plot_busbw.py" --out "$out/busbw.png" "$dir"
  fi
  if [ -f "$dir/none.jsonl" ]; then
    runs=()
    for f in "$dir"/*.jsonl; do [ "$f" = "$dir/none.jsonl" ] || runs+=("$f"); done
    draw "$out/loss_curves.png" "$python" "$root/tools/plot/plot_convergence.py" \
      --baseline "$dir/none.jsonl" --out "$out/loss_curves.png" "${runs[@]}"
  fi
  diloco=()
  for f in "$dir"/diloco-*.jsonl; do [[ $f == *-seed* ]] || diloco+=("$f"); done
  if [ -f "$dir/data-parallel.jsonl" ] && [ ${#diloco[@]} -gt 0 ]; then
    draw "$out/loss_bytes.png" "$python" "$root/bench/diloco_plot.py" --out "$out/loss_bytes.png" \
      "$dir/data-parallel.jsonl" "${diloco[@]}"
  fi
  if [ -f "$dir/data-parallel-seed1.jsonl" ]; then
    draw "$out/loss_bytes_frontier.png" "$python" "$root/bench/diloco_frontier.py" \
      --out "$out/loss_bytes_frontier.png" "$dir"
  fi
  if [ -f "$dir/report.args" ]; then
    mapfile -t args < "$dir/report.args"
    mkdir -p "$out"
    png=$(cd "$out" && pwd)/loss_rejoin.png
    # The paths in report.args are relative to the run's folder; the last --png wins.
    draw "$png" in_dir "$dir" \
      "$python" "$root/bench/elastic_rejoin_report.py" "${args[@]}" --png "$png"
  fi
  for json in "$dir"/*.png.json; do
    png=$out/$(basename "${json%.json}")
    draw "$png" "$python" "$root/tools/plot/plot_schedule.py" "$json" "$png"
  done
  shopt -u nullglob
done < <(find "$results" -type d -print0 | sort -z)

[ "$drawn" -gt 0 ] || [ "$failed" -gt 0 ] ||
  { echo "plots: nothing to plot under $results (see bench/plots.sh's header)" >&2; exit 2; }
echo "plots: $drawn drawn, $failed failed"
[ "$failed" -eq 0 ]
