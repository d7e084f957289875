#!/usr/bin/env bash
# scripts/install.sh PREFIX: builds strait if needed (scripts/build.sh) and installs it into PREFIX:
# lib/libstrait.so*, include/strait/, lib/cmake/strait/ (find_package(strait)), lib/pkgconfig/
# strait.pc, bin/strait and bin/strait-bench. The build folder is ${STRAIT_BUILD_DIR:-build}.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  echo "usage: scripts/install.sh PREFIX   (e.g. scripts/install.sh /opt/strait)" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_BUILD_DIR:-$root/build}
prefix=$(realpath -m "$1")
"$root/scripts/build.sh"
mkdir -p "$prefix" 2>/dev/null || true
if [ ! -w "$prefix" ]; then
  echo "install: cannot write to $prefix: run as a user who can (e.g. sudo scripts/install.sh $1)" >&2
  exit 1
fi
cmake --install "$build" --prefix "$prefix" >"$build/install.log"
libdir=$(dirname "$(find "$prefix" -name 'libstrait.so' -print -quit)")
echo "strait: installed into $prefix (files: $build/install_manifest.txt)"
echo "  CMake:      find_package(strait CONFIG REQUIRED) with -DCMAKE_PREFIX_PATH=$prefix;"
echo "              target_link_libraries(app PRIVATE strait::strait)"
echo "  pkg-config: PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs strait"
echo "  tools:      $prefix/bin/strait, $prefix/bin/strait-bench"
