#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, configures a CUDA build, builds the GPU tests and runs
# every test labelled "gpu" (ctest -L gpu), printing each result. STRAIT_REQUIRE_GPU=1 is set so
# a test that finds no usable device fails instead of skipping.
#
# Usage: bench/gpu_check.sh [extra ctest args]
# Env:   STRAIT_GPU_BUILD_DIR  build folder (default: build-gpu)
#        STRAIT_CUDA_ARCH      CMAKE_CUDA_ARCHITECTURES (default: native, this machine's GPU)
#        STRAIT_JOBS           build parallelism (default: nproc)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_GPU_BUILD_DIR:-$root/build-gpu}
arch=${STRAIT_CUDA_ARCH:-native}
jobs=${STRAIT_JOBS:-$(nproc)}
# The test executables that carry the "gpu" label (tests/*/CMakeLists.txt).
targets=(kernels_cuda_reduce_test comm_nccl_test)

echo "== GPU"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv
else
  echo "nvidia-smi not found: the tests will report why no device is usable"
fi

echo "== configure ($build, CUDA architectures: $arch)"
mkdir -p "$build"
log="$build/gpu_check_configure.log"
cmake -S "$root" -B "$build" -G Ninja -DSTRAIT_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  >"$log" 2>&1 || { cat "$log"; exit 1; }
grep "strait: CUDA" "$log"

echo "== build ${targets[*]}"
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

echo "== ctest -L gpu"
rc=0
STRAIT_REQUIRE_GPU=1 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 600 "$@" || rc=$?
echo "== gpu_check: $([ $rc -eq 0 ] && echo PASSED || echo "FAILED (ctest exit $rc)")"
exit $rc
