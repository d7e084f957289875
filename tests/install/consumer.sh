#!/usr/bin/env bash
# consumer.sh find_package|pkg_config PREFIX WORK GENERATOR CXX CC: configures and builds
# tests/install/<kind>/, a project outside the tree (C++ through find_package, C99 over
# <strait/strait.h> through pkg-config), against the installed PREFIX only,
# checks that its program loads PREFIX's libstrait.so, and
# runs it on 2 ranks with the installed `strait run`. The program checks its own results.
set -euo pipefail
kind=$1 prefix=$2 work=$3 generator=$4 cxx=$5 cc=$6
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { echo "install.$kind: $*" >&2; exit 1; }

rm -rf "$work"
args=(-S "$here/$kind" -B "$work" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc"
      -DCMAKE_BUILD_TYPE=Release)
unset PKG_CONFIG_PATH CMAKE_PREFIX_PATH
case $kind in
  find_package) args+=(-DCMAKE_PREFIX_PATH="$prefix") ;;
  pkg_config)
    pc=$(find "$prefix" -name strait.pc -print -quit)
    [ -n "$pc" ] || fail "no strait.pc under $prefix"
    PKG_CONFIG_PATH=$(dirname "$pc")
    export PKG_CONFIG_PATH
    echo "pkg-config --cflags --libs strait: $(pkg-config --cflags --libs strait)" ;;
  *) fail "unknown kind" ;;
esac
cmake "${args[@]}" >"$work.configure.log" 2>&1 || { cat "$work.configure.log" >&2; fail "configure failed"; }
cmake --build "$work" >"$work.build.log" 2>&1 || { cat "$work.build.log" >&2; fail "build failed"; }

loaded=$(ldd "$work/app" | awk '$1 ~ /^libstrait[.]so/ { print $3 }')
case $loaded in
  "$prefix"/*) echo "app loads $loaded" ;;
  *) fail "app loads libstrait.so from '$loaded', not from $prefix" ;;
esac
# A rank that fails must not leave the other waiting out the default 300 s. Each rank prints
# "rank R of 2: ... OK" only after its checks passed: both must have run and passed.
STRAIT_TIMEOUT_S=30 "$prefix/bin/strait" run -n 2 -- "$work/app" 2>&1 | tee "$work.run.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "strait run -n 2 failed (above)"
passed=$(grep -cE '^(\[[^]]*\] *)?rank [01] of 2: .* OK' "$work.run.log" || true)
[ "$passed" -eq 2 ] || fail "$passed of 2 ranks reported their checks passed"
