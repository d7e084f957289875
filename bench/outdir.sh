# shellcheck shell=bash
# Sourced by the benchmark scripts: where a run's raw output goes when the user names no folder.
#   results_dir NAME   prints ${STRAIT_RESULTS_DIR:-<repo>/results}/<UTC date>-NAME, with -2, -3,
#                      ... appended when that folder exists (a second run never mixes its files
#                      into the first's). results/ is ignored by git: run data stays out of the tree.
results_dir() {
  local base out i
  base=${STRAIT_RESULTS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/results}
  base=$base/$(date -u +%Y-%m-%d)-$1
  out=$base
  for i in $(seq 2 99); do [ -e "$out" ] || break; out=$base-$i; done
  printf '%s\n' "$out"
}
