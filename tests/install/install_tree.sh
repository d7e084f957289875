#!/usr/bin/env bash
# install_tree.sh BUILD PREFIX LIBDIR VERSION SOVERSION: `cmake --install BUILD --prefix PREFIX`
# into an empty PREFIX (the fixture the other install tests use), then checks the tree: the
# library's file names and SONAME, the package and strait.pc, headers rewritten to their
# installed paths, RUNPATHs that point nowhere into the build, and tools that start.
set -euo pipefail
build=$1 prefix=$2 libdir=$3 version=$4 soversion=$5
fail() { echo "install.tree: $*" >&2; exit 1; }

rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
echo "install tree ($prefix):"
(cd "$prefix" && find . -path ./include/strait -prune -o -print | sort | sed 's/^/  /')
echo "  ./include/strait: $(find "$prefix/include/strait" -name '*.h' | wc -l) headers"

lib=$prefix/$libdir
if [ ! -f "$lib/libstrait.so.$version" ] || [ -L "$lib/libstrait.so.$version" ]; then
  fail "no file $lib/libstrait.so.$version"
fi
[ "$(readlink "$lib/libstrait.so.$soversion")" = "libstrait.so.$version" ] ||
  fail "$lib/libstrait.so.$soversion is not a link to libstrait.so.$version"
[ "$(readlink "$lib/libstrait.so")" = "libstrait.so.$soversion" ] ||
  fail "$lib/libstrait.so is not a link to libstrait.so.$soversion"
soname=$(readelf -d "$lib/libstrait.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libstrait.so.$soversion" ] || fail "SONAME is '$soname', not libstrait.so.$soversion"

for f in straitConfig.cmake straitConfigVersion.cmake straitTargets.cmake; do
  [ -f "$lib/cmake/strait/$f" ] || fail "missing $lib/cmake/strait/$f"
done
export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --modversion strait)" = "$version" ] || fail "strait.pc: version is not $version"
cflags=$(pkg-config --cflags strait | xargs)  # xargs: pkgconf adds a trailing space
libs=$(pkg-config --libs strait | xargs)
[ "$cflags" = "-I$prefix/include" ] || fail "strait.pc: Cflags are '$cflags', not -I$prefix/include"
[ "$libs" = "-L$lib -lstrait" ] || fail "strait.pc: Libs are '$libs', not -L$lib -lstrait"

# Installed headers include each other by their installed names only.
if grep -rnE '#[[:space:]]*include[[:space:]]*"(core|kernels|comm|offload|scheduler|tools)/' \
    "$prefix/include/strait"; then
  fail "installed headers above still include by in-tree paths"
fi

# Nothing installed may load from (or point into) the build or source tree.
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for f in "$lib/libstrait.so.$version" "$prefix/bin/strait" "$prefix/bin/strait-bench"; do
  runpath=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  case ":$runpath:" in
    *"$build"* | *"$src"*) fail "$f has RUNPATH '$runpath', into the build or source tree" ;;
  esac
done
"$prefix/bin/strait" --help >/dev/null || fail "$prefix/bin/strait --help failed"
"$prefix/bin/strait-bench" --help >/dev/null || fail "$prefix/bin/strait-bench --help failed"
echo "install.tree: OK (libstrait.so.$version, SONAME $soname, package, strait.pc, tools)"
