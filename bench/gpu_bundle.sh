#!/usr/bin/env bash
# Packs the GPU tests and benchmarks of an existing CUDA build, with the Debian shared libraries
# they load, into .gpu/ (ignored by git) for a GPU machine that has the NVIDIA driver, CUDA and
# NCCL but not strait's Debian dependencies (UCX, OpenBLAS, spdlog, ...). There,
# `bash .gpu/run.sh` unpacks and runs them (bench/gpu_run_bundle.sh); bench/gpu_check.sh is the
# choice on a GPU machine that can build strait itself.
#
# Usage: bench/gpu_bundle.sh [build dir, default build]   (the build must have STRAIT_WITH_CUDA on
# and CMAKE_CUDA_ARCHITECTURES covering the target GPU; the default 80;90 covers A100 and H100/H200)
# The bundle also carries libstrait.so, the strait launcher and python/ (package and tests), so
# that run.sh runs torch's DistributedTest suite and the DDP overlap test on the GPU machine's
# torch 2.x.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
bins=(tests/kernels/kernels_cuda_reduce_test tests/kernels/kernels_cuda_quantize_test
      tests/comm/comm_nccl_test tests/comm/comm_device_test tests/offload/offload_pinned_pool_test
      bench/strait_device_busbw bench/strait_micro_bench strait)
cmake --build "$build" --target "${bins[@]##*/}" strait_shared >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib/ucx" "$stage/fallback"
for b in "${bins[@]}"; do cp "$build/$b" "$stage/bin/"; done
# The torch backend's tests for torch 2.x (GPU machines have it; Debian has 1.13): the library,
# the Python package and its tests (torch's DistributedTest suite, DDP overlap), run by run.sh.
cp -L "$build/lib/libstrait.so" "$stage/lib/"
cp -r "$root/python" "$stage/python"
# Every library the binaries load, except the C runtime (the GPU machine's own is used), the
# driver and NCCL (218 MB; the GPU machine's copy is found at run time).
skip='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libnccl|libcuda)\.so'
ldd "$stage"/bin/* | awk '/=> \//{print $1" "$3}' | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] || cp -L "$path" "$stage/lib/$name"
done
# UCX's transport modules (cma: shared memory between processes); libucs finds them in ./ucx.
ucx=$(dirname "$(ldd "$stage"/bin/* | awk '/libucs\.so/{print $3; exit}')")/ucx
[ -e "$ucx/libuct_cma.so.0" ] && cp -L "$ucx/libuct_cma.so.0" "$stage/lib/ucx/"
# Used only when the GPU machine's C++ runtime is older than the one built with.
for l in libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$(ldd "$stage"/bin/* | awk -v l="$l" '$1==l{print $3; exit}')" "$stage/fallback/"
done
mkdir -p "$root/.gpu"
tar -cJf "$root/.gpu/bundle.tar.xz" -C "$stage" .
cp "$root/bench/gpu_run_bundle.sh" "$root/.gpu/run.sh"
echo "gpu_bundle: $(du -h "$root/.gpu/bundle.tar.xz" | cut -f1) in .gpu/; on the GPU machine: bash .gpu/run.sh"
