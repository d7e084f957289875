#!/usr/bin/env bash
# Runs the GPU tests and benchmarks packed by bench/gpu_bundle.sh, on a GPU machine, from the
# repository root: every test with STRAIT_REQUIRE_GPU=1 (a test that finds no usable device fails
# instead of skipping), the device allreduce sweep and the GPU codec throughput. Logs go to $OUT
# (default ${STRAIT_RESULTS_DIR:-results}/DATE-gpu: results/ of the repository root, as in
# bench/outdir.sh). Exits non-zero when any of them failed.
set -uo pipefail
out=${OUT:-${STRAIT_RESULTS_DIR:-results}/$(date -u +%Y-%m-%d)-gpu}
mkdir -p "$out"
g=$(mktemp -d)
tar -xJf .gpu/bundle.tar.xz -C "$g"
nccl=$(find /opt /usr -name libnccl.so.2 2>/dev/null | head -1)
[ -n "$nccl" ] || { echo "no libnccl.so.2 under /opt or /usr: install NCCL" >&2; exit 1; }
echo "NCCL: $nccl"
nccl_dir=$(dirname "$nccl")
export LD_LIBRARY_PATH=$g/lib:$nccl_dir
if ldd "$g/bin/comm_nccl_test" | grep -q "not found"; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$g/fallback
fi
ldd "$g/bin/comm_nccl_test" | grep "not found" && exit 1
nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv
export STRAIT_REQUIRE_GPU=1
rc=0
for t in kernels_cuda_reduce_test kernels_cuda_quantize_test comm_nccl_test comm_device_test \
         offload_pinned_pool_test; do
  echo "== $t"
  timeout 300 "$g/bin/$t" --gtest_brief=1 >"$out/$t.log" 2>&1 || rc=1
  grep -v -E '^\[ +(RUN|OK) ' "$out/$t.log" | tail -40
done
echo "== strait_device_busbw"
timeout 300 "$g/bin/strait_device_busbw" 2>&1 | tee "$out/busbw.log" || rc=1
echo "== BM_DeviceCodec"
timeout 300 "$g/bin/strait_micro_bench" --benchmark_filter=BM_DeviceCodec 2>&1 |
  tee "$out/codec.log" || rc=1
echo "== $([ $rc -eq 0 ] && echo PASSED || echo FAILED)"
exit $rc
