#!/usr/bin/env bash
# stock_cmake.sh SOURCE WORK: configures strait against Debian 12's unpatched CMake modules (the
# cmake-data package as the archive ships it), with CUDA on, as a stock Debian 12 machine with
# CUDA 13 would. Catches a return of issue 12's failure: CMake 3.25.1's FindCUDAToolkit stops at
# "set_property could not find TARGET CUDA::nvToolsExt" unless cmake/Cuda.cmake works around it.
# The image running the tests may carry a patched module, hence the package's own copy, fetched
# once with `apt-get download` into WORK. Exit 77 (skipped) without nvcc or without the package.
set -euo pipefail
src=$(realpath -m "$1") work=$(realpath -m "$2")  # CMAKE_MODULE_PATH must be absolute
skip() { echo "install.stock_cmake: skipped: $*"; exit 77; }
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || command -v nvcc >/dev/null || skip "no nvcc: the failure needs a CUDA toolkit"

cmake_minor=$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
modules=$work/cmake-data/usr/share/cmake-$cmake_minor/Modules
if [ ! -f "$modules/FindCUDAToolkit.cmake" ]; then
  version=$(dpkg-query -W -f='${Version}' cmake-data 2>/dev/null) ||
    skip "cmake-data is not a Debian package here"
  mkdir -p "$work/deb"
  rm -f "$work/deb"/*.deb
  # The installed version first (the modules must match this cmake), else the archive's.
  if ! (cd "$work/deb" && { apt-get download "cmake-data=$version" || apt-get download cmake-data; } \
        >"$work/download.log" 2>&1); then
    skip "apt-get download cmake-data failed: $(tail -n 1 "$work/download.log")"
  fi
  rm -rf "$work/cmake-data"
  dpkg-deb -x "$work"/deb/cmake-data_*.deb "$work/cmake-data"
  [ -f "$modules/FindCUDAToolkit.cmake" ] ||
    skip "the downloaded cmake-data has no Modules for cmake $cmake_minor"
fi
if grep -q 'if(TARGET CUDA::nvToolsExt AND' "$modules/FindCUDAToolkit.cmake"; then
  echo "install.stock_cmake: note: this cmake-data's FindCUDAToolkit already guards nvToolsExt"
fi

# CMAKE_MODULE_PATH is searched before CMake's own modules: every module comes from the package.
rm -rf "$work/build"
if ! cmake -S "$src" -B "$work/build" -G Ninja -DSTRAIT_WITH_CUDA=ON \
      -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_MODULE_PATH="$modules" >"$work/configure.log" 2>&1; then
  grep -A12 'CMake Error' "$work/configure.log" >&2 || tail -n 40 "$work/configure.log" >&2
  echo "install.stock_cmake: strait does not configure with Debian's stock CMake modules" >&2
  exit 1
fi
grep -q 'CUDA kernels ON' "$work/configure.log" ||
  { echo "install.stock_cmake: configured, but without CUDA" >&2; exit 1; }
rm -rf "$work/build"
echo "install.stock_cmake: configures with CUDA on Debian's stock cmake-data $cmake_minor modules"
