#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, configures a CUDA build, builds the GPU tests and runs
# every test labelled "gpu" (ctest -L gpu), printing each result, then a device-buffer allreduce
# bandwidth sweep (strait_device_busbw: Communicator's NCCL path next to raw NCCL, one rank per
# GPU), and the GPU codec throughput (strait_micro_bench's BM_DeviceCodec*: encode and decode-add
# GB/s per codec). STRAIT_REQUIRE_GPU=1 is set so a test that finds no usable device fails instead of
# skipping. Takes a few minutes once built.
#
# Usage: bench/gpu_check.sh [extra ctest args]
# Env:   STRAIT_GPU_BUILD_DIR  build folder (default: build-gpu)
#        STRAIT_CUDA_ARCH      CMAKE_CUDA_ARCHITECTURES (default: native, this machine's GPU)
#        STRAIT_JOBS           build parallelism (default: nproc)
#        STRAIT_BUSBW_ARGS     flags for strait_device_busbw (default: 8 B .. 256 MiB, f32)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${STRAIT_GPU_BUILD_DIR:-$root/build-gpu}
arch=${STRAIT_CUDA_ARCH:-native}
jobs=${STRAIT_JOBS:-$(nproc)}
# The test executables that carry the "gpu" label (tests/*/CMakeLists.txt).
targets=(kernels_cuda_reduce_test kernels_cuda_quantize_test comm_nccl_test comm_device_test
         offload_pinned_pool_test
         strait_device_busbw strait_micro_bench)

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

echo "== device allreduce bandwidth (strait_device_busbw ${STRAIT_BUSBW_ARGS:-})"
bw=0
# shellcheck disable=SC2086  # the flags are meant to split
timeout 600 "$build/bench/strait_device_busbw" ${STRAIT_BUSBW_ARGS:-} || bw=$?
[ $rc -eq 0 ] && rc=$bw

echo "== GPU codec throughput (strait_micro_bench --benchmark_filter=BM_DeviceCodec)"
codec=0
timeout 600 "$build/bench/strait_micro_bench" --benchmark_filter=BM_DeviceCodec || codec=$?
[ $rc -eq 0 ] && rc=$codec
echo "== gpu_check: $([ $rc -eq 0 ] && echo PASSED || echo "FAILED (exit $rc)")"
exit $rc
