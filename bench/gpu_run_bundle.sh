#!/usr/bin/env bash
# Runs the GPU tests and benchmarks packed by bench/gpu_bundle.sh, on a GPU machine, from the
# repository root: every test with STRAIT_REQUIRE_GPU=1 (a test that finds no usable device fails
# instead of skipping), the device allreduce sweep, the GPU codec throughput, and with torch 2.x
# torch's DistributedTest suite and the DDP overlap test on the strait backend. Logs go to $OUT
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
# torch 2.x (the GPU machine's python3): torch's DistributedTest suite on Gloo's passes at
# WORLD_SIZE 2 (a 2.x run lists its own Gloo passes first: the 1.13 list names 1.13's tests) and
# the DDP overlap test, over this bundle's libstrait.so.
if python3 -c 'import sys, torch; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 else 1)' \
    2>/dev/null; then
  export PYTHONPATH=$g/python STRAIT_LIBRARY=$g/lib/libstrait.so PYTHONWARNINGS=ignore::UserWarning
  python3 -c 'import torch; print("torch", torch.__version__)'
  suite=$g/python/tests/torch_suite
  echo "== torch 2.x: DistributedTest, Gloo's passes at WORLD_SIZE 2, then strait on them"
  timeout 600 python3 "$suite/compare.py" --world-size 2 --strait-on-gloo-passes \
    >"$out/torch2_suite.log" 2>&1 || rc=1
  tail -30 "$out/torch2_suite.log"
  echo "== torch 2.x: DDP overlap (pending C++ Works)"
  timeout 300 "$g/bin/strait" run -n 2 -- python3 "$g/python/tests/ddp_overlap.py" \
    >"$out/torch2_ddp_overlap.log" 2>&1 || rc=1
  tail -5 "$out/torch2_ddp_overlap.log"
else
  echo "== torch 2.x: skipped (python3 has no torch 2.x)"
fi
echo "== $([ $rc -eq 0 ] && echo PASSED || echo FAILED)"
exit $rc
