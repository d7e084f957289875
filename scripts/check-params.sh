#!/usr/bin/env bash
# The parameter registry's lint (core/params.h): fails, naming FILE:LINE, on a getenv of a STRAIT_
# name anywhere but core/params.cpp (tests included: they set variables, and read them through the
# registry), and on a STRAIT_ variable that a script or the Python package reads but
# core/param_table.cpp does not declare (docs/environment.md lists the table).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
files() { git ls-files --cached --others --exclude-standard -- "$@"; }
status=0
# C and C++: getenv / secure_getenv of a literal STRAIT_ name.
reads=$(files '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' | grep -v '^core/params\.cpp$' |
  xargs -r grep -nE '(secure_)?getenv *\( *"STRAIT_' || true)
if [ -n "$reads" ]; then
  printf 'getenv of STRAIT_ variables outside the registry (use strait::params, core/params.h):\n' >&2
  printf '%s\n' "$reads" | sed 's/^/  /' >&2
  status=1
fi
# Shell and Python read their own variables; each must still be declared.
declared=$(grep -oE '"STRAIT_[A-Z0-9_]+"' core/param_table.cpp | tr -d '"' | sort -u)
used=$( (files '*.sh' | xargs -r grep -noE '\$\{?STRAIT_[A-Z0-9_]+' || true
         files '*.py' | xargs -r grep -noE 'environ(\.get)?[[(] *"STRAIT_[A-Z0-9_]+' || true) |
  sed -E 's/[$\{]+(STRAIT_)/\1/; s/environ(\.get)?[[(] *"//')
missing=$(printf '%s\n' "$used" | while IFS= read -r line; do
  [ -n "$line" ] || continue
  name=${line##*:}
  grep -qx "$name" <<<"$declared" || printf '  %s (%s is not in core/param_table.cpp)\n' "$line" "$name"
done)
if [ -n "$missing" ]; then
  printf 'STRAIT_ variables read but not declared in the registry:\n%s\n' "$missing" >&2
  status=1
fi
[ "$status" -eq 0 ] && echo "$(wc -l <<<"$declared") parameters declared; getenv of STRAIT_ names only in core/params.cpp"
exit "$status"
