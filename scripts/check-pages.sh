#!/usr/bin/env bash
# Fails, naming the page and line, when README.md passes 150 lines or has a line over 100
# characters outside code blocks, bench/RESULTS.md passes 120 lines or a page of docs/results/ 250,
# or either has a line over 200: the README is a page a newcomer reads in minutes, RESULTS.md (the
# headline) one taken in at a glance, a results page one topic's runs; details go to docs/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=0
check() {  # check FILE MAX_LINES MAX_WIDTH CODE_EXEMPT
  local file=$1 max_lines=$2 width=$3 exempt=$4 n
  n=$(wc -l <"$file")
  if [ "$n" -gt "$max_lines" ]; then
    echo "$file: $n lines (at most $max_lines: move details into docs/)" >&2
    bad=1
  fi
  awk -v w="$width" -v exempt="$exempt" -v f="$file" '
    /^```/ { code = !code; next }
    (!code || !exempt) && length($0) > w {
      printf "%s:%d: %d characters (at most %d)\n", f, FNR, length($0), w; found = 1 }
    END { exit found }' "$file" >&2 || bad=1
}
check README.md 150 100 1
check bench/RESULTS.md 120 200 0
for page in docs/results/*.md; do check "$page" 250 200 0; done
[ "$bad" -eq 0 ] || exit 1
echo "README.md $(wc -l <README.md) lines, bench/RESULTS.md $(wc -l <bench/RESULTS.md) lines, within their limits"
