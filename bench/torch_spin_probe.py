#!/usr/bin/python3
"""Diagnostic: 16 KiB, 64 KiB and 256 KiB f32 allreduce from one torch process, three ways:
dist.all_reduce of a tensor of its own, of a view into a 256 MiB tensor, and straitAllReduce
called directly through ctypes on the same communicator (no ProcessGroup). Mean of 50 calls after
a barrier, per rank. Compare a run with the default adaptive polling and one with a fixed budget:

  PYTHONPATH=python build/strait run -n 2 -- /usr/bin/python3 bench/torch_spin_probe.py
  STRAIT_SPIN_US=5000 PYTHONPATH=python build/strait run -n 2 -- /usr/bin/python3 \\
      bench/torch_spin_probe.py
"""
import datetime
import time

import torch
import torch.distributed as dist

import strait._capi as C
import strait.torch  # noqa: F401

dist.init_process_group("strait", timeout=datetime.timedelta(seconds=60))
big = torch.ones(64 << 20)
comm = dist.distributed_c10d._get_default_group()._comm


def timed(fn, k=50):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(k):
        fn()
    return (time.perf_counter() - start) / k * 1e6


for nbytes in (16384, 65536, 262144):
    own = torch.ones(nbytes // 4)
    view = big[: nbytes // 4]
    p = own.data_ptr()
    count = nbytes // 4
    print(f"rank {dist.get_rank()} {nbytes:>7} B: own tensor "
          f"{timed(lambda: dist.all_reduce(own)):8.1f} us, view "
          f"{timed(lambda: dist.all_reduce(view)):8.1f} us, straitAllReduce "
          f"{timed(lambda: C.straitAllReduce(p, p, count, C.FLOAT32, C.SUM, comm, None)):8.1f}"
          " us", flush=True)
