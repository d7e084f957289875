#!/usr/bin/python3
"""torch.distributed all_reduce (f32 sum) with backend strait against backend gloo, in one job,
and the Python/binding overhead of the strait backend per call.

One rank of a job started by a launcher (`strait run -n 2 -- /usr/bin/python3 THIS ...`;
bench/compare_torch.sh does it). The default group is strait's, a gloo group spans the same ranks.
For each size, strait then gloo (so both see the same load): WARMUP calls, a barrier of that
group, ITERS timed calls of `dist.all_reduce(t, group=g)`; a rank's time is the mean per call, the
reported time the maximum over ranks. algbw = size / time, busbw = algbw * 2(n-1)/n (nccl-tests).
After timing, one call on exact small integers checks the sums (#wrong).

Overhead per call (all in this process, in batches of 100 calls, the 2-rank kinds alternating
batch by batch, ROUNDS times; the fastest batch's mean per call, and the median batch's):
  pg_8B      dist.all_reduce of 8 bytes through the strait group (2 ranks);
  capi_8B    straitAllReduce of the same 8 bytes on the same communicator, called directly
             through ctypes (the C call plus one ctypes call, ~0.3 us);
  overhead   = pg_8B - capi_8B: what torch's Python wrapper, the ProcessGroup, the Work and the
             extra C calls (Async + Wait + RequestFree) add to one allreduce.
  ws1_pg / ws1_capi / ws1_overhead: the same on a group of this rank alone (no network at all).
Writes a JSON file (--json) and prints a table.
"""

import argparse
import ctypes
import datetime
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

import strait._capi as C
import strait.torch  # noqa: F401 (registers the backend)
from bench_sizes import parse_size  # bench/bench_sizes.py, beside this file


def timed(fn, iters):
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def max_over_ranks(value, gloo):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def iters_for(nbytes, a):
    if nbytes <= 64 << 10:
        return a.small_iters
    if nbytes <= 4 << 20:
        return a.large_iters
    return a.huge_iters


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="8,64,512,4K,16K,64K,256K,1M,4M,16M,64M,256M")
    p.add_argument("--small-iters", type=int, default=1000)
    p.add_argument("--large-iters", type=int, default=50)
    p.add_argument("--huge-iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--overhead-iters", type=int, default=2000,
                   help="calls per round of the 2-rank overhead figures")
    p.add_argument("--local-iters", type=int, default=20000,
                   help="calls per round of the 1-rank (local) overhead figures")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    a = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("strait", timeout=datetime.timedelta(seconds=600))
    rank, n = dist.get_rank(), dist.get_world_size()
    strait_g = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    # Groups of one rank each (every rank creates all of them; each is a member of its own).
    solo = [dist.new_group([r], backend="strait") for r in range(n)][rank]
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    big = torch.ones(max(sizes) // 4, dtype=torch.float32)
    factor = 2 * (n - 1) / n

    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        t = big[:count]
        iters = iters_for(nbytes, a)
        row = {"bytes": nbytes, "count": count, "iters": iters}
        for name, g in (("strait", strait_g), ("gloo", gloo)):
            t.fill_(1.0)
            for _ in range(min(a.warmup, iters)):
                dist.all_reduce(t, group=g)
            dist.barrier(group=g)
            us = max_over_ranks(timed(lambda: dist.all_reduce(t, group=g), iters), gloo)
            pattern = torch.arange(count, dtype=torch.int64) % 7 + 1
            t.copy_(pattern * (rank + 1))
            dist.all_reduce(t, group=g)
            wrong = torch.tensor([int((t != pattern * (n * (n + 1) // 2)).sum())])
            dist.all_reduce(wrong, group=gloo)
            algbw = nbytes / us / 1e3
            row[name] = {"time_us": us, "algbw_GBps": algbw, "busbw_GBps": algbw * factor,
                         "wrong": int(wrong.item())}
        rows.append(row)
        if rank == 0:
            s, g = row["strait"], row["gloo"]
            print(f"{nbytes:>11} B  strait {s['time_us']:>11.2f} us {s['busbw_GBps']:>7.3f} GB/s"
                  f"  gloo {g['time_us']:>11.2f} us {g['busbw_GBps']:>7.3f} GB/s  "
                  f"time gloo/strait {g['time_us'] / s['time_us']:>7.1f}x  wrong "
                  f"{s['wrong']}/{g['wrong']}", flush=True)

    # ---- overhead ----
    # Per call, in batches of BATCH calls; the figure is the fastest batch's mean (the cost
    # itself, without the time slices other processes take on this shared machine), with the
    # median batch beside it. The five kinds are interleaved batch by batch.
    x = torch.ones(2, dtype=torch.float32)  # 8 bytes
    ptr = x.data_ptr()
    allreduce = C.straitAllReduce
    world_comm = dist.distributed_c10d._get_default_group()._comm
    solo_comm = solo._comm
    get_version = C.lib.straitGetVersion
    v = ctypes.c_int()
    vref = ctypes.byref(v)
    batch = 100
    kinds = {
        "pg_8B": (lambda: dist.all_reduce(x), a.overhead_iters),
        "capi_8B": (lambda: allreduce(ptr, ptr, 2, C.FLOAT32, C.SUM, world_comm, None),
                    a.overhead_iters),
        "ws1_pg": (lambda: dist.all_reduce(x, group=solo), a.local_iters),
        "ws1_capi": (lambda: allreduce(ptr, ptr, 2, C.FLOAT32, C.SUM, solo_comm, None),
                     a.local_iters),
        "ctypes_noop": (lambda: get_version(vref), a.local_iters),
    }
    samples = {key: [] for key in kinds}
    for _ in range(a.rounds):
        for key in ("ws1_pg", "ws1_capi", "ctypes_noop"):  # local: the ranks drift apart
            fn, iters = kinds[key]
            for _ in range(max(1, iters // batch)):
                samples[key].append(timed(fn, batch))
        # Gloo absorbs the drift, so that no strait wait does (a long one lowers strait's
        # polling budget, see bench/RESULTS.md); then the two 2-rank kinds batch by batch, in
        # the same conditions.
        dist.barrier(group=gloo)
        for _ in range(max(1, a.overhead_iters // batch)):
            for key in ("pg_8B", "capi_8B"):
                samples[key].append(timed(kinds[key][0], batch))
    best = {key: max_over_ranks(min(vals), gloo) for key, vals in samples.items()}
    med = {key: max_over_ranks(statistics.median(vals), gloo) for key, vals in samples.items()}
    for d in (best, med):
        d["overhead_2ranks"] = d["pg_8B"] - d["capi_8B"]
        d["overhead_ws1"] = d["ws1_pg"] - d["ws1_capi"]
    if rank == 0:
        for label, d in (("fastest batch", best), ("median batch", med)):
            print(f"overhead per call, us ({label} of {batch} calls, max over ranks): " +
                  ", ".join(f"{key} {val:.2f}" for key, val in d.items()), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"ranks": n, "torch": torch.__version__, "rows": rows,
                           "overhead_us": {"fastest_batch": best, "median_batch": med,
                                           "batch": batch}}, f, indent=1)
    dist.barrier(group=gloo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
