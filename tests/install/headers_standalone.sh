#!/usr/bin/env bash
# headers_standalone.sh PREFIX CXX CC: every installed header compiles on its own (included
# twice) with nothing but -I PREFIX/include, warnings as errors: the installed set is closed and
# needs no third-party header. The C API's header (strait/strait.h) must also compile as C99.
set -euo pipefail
prefix=$1 cxx=$2 cc=$3
cd "$prefix/include"
mapfile -t headers < <(find strait -name '*.h' | sort)
[ ${#headers[@]} -gt 0 ] || { echo "headers: none under $prefix/include/strait" >&2; exit 1; }
flags=(-fsyntax-only -Wall -Wextra -Wpedantic -Werror -I "$prefix/include")
compile_one() {  # $1: header; the rest: the compiler and its flags
  local header=$1
  shift
  if ! printf '#include <%s>\n#include <%s>\n' "$header" "$header" | "$@" 2>&1; then
    echo "headers: <$header> does not compile on its own: $*" >&2
    return 1
  fi
}
export -f compile_one
printf '%s\n' "${headers[@]}" |
  xargs -P 2 -I{} bash -c 'compile_one "$@"' _ {} "$cxx" -std=c++20 "${flags[@]}" -x c++ -
if [ -f strait/strait.h ]; then
  compile_one strait/strait.h "$cc" -std=c99 "${flags[@]}" -x c -
fi
echo "headers: ${#headers[@]} installed headers compile standalone as C++20$([ -f strait/strait.h ] && echo ', strait/strait.h as C99 too')"
