#!/usr/bin/python3
"""torch.distributed all_reduce (f32 sum) on a strait.torch.empty tensor (symmetric memory, read
in place from the peers' mappings) against an ordinary tensor, in one job of N ranks on one host:
`strait run -n 2 -- /usr/bin/python3 bench/torch_symmetric.py [--sizes 4M,64M] [--iters 20]`.

Four rows per size, each on its own strait group, the kinds interleaved round by round so that
all see the same load:
  ring       an ordinary tensor, strait's default rules (the ring from 1 MiB);
  copy       an ordinary tensor, the single-copy allreduce (rule allreduce:1M-inf:single_copy:
             peers' data read with process_vm_readv);
  symmetric  a strait.torch.empty tensor, the same rule: read in place, no system call;
  sym_ring   a strait.torch.empty tensor, the default rules: the ring's messages read in place
             from the mapping by the transport (2 ranks; from 3 the mailbox copies them).
A rank's time is its fastest round's mean per call, the reported time the maximum over ranks;
busbw = size / time * 2(n-1)/n (nccl-tests). One call on exact small integers checks each row's
sums (#wrong). Prints a table; --json writes the rows.
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import strait.torch
from bench_sizes import parse_size  # bench/bench_sizes.py, beside this file

RULE = "allreduce:1M-inf:single_copy"


def strait_group(rule):
    # STRAIT_TUNE is read when a communicator is created.
    if rule:
        os.environ["STRAIT_TUNE"] = rule
    else:
        os.environ.pop("STRAIT_TUNE", None)
    return dist.new_group(backend="strait")


def max_over_ranks(value, gloo):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1M,4M,16M,64M")
    p.add_argument("--iters", type=int, default=10, help="calls per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    a = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.group.WORLD
    groups = {"ring": strait_group(None), "copy": strait_group(RULE),
              "symmetric": strait_group(RULE), "sym_ring": strait_group(None)}
    factor = 2 * (n - 1) / n
    rows = []
    for nbytes in (parse_size(s) for s in a.sizes.split(",")):
        count = nbytes // 4
        tensors = {"ring": torch.ones(count), "copy": torch.ones(count),
                   "symmetric": strait.torch.empty(count, group=groups["symmetric"]),
                   "sym_ring": strait.torch.empty(count, group=groups["sym_ring"])}
        best = {k: float("inf") for k in tensors}
        for k, t in tensors.items():  # warm up: pages faulted in, connections made
            t.fill_(1.0)
            dist.all_reduce(t, group=groups[k])
        for _ in range(a.rounds):
            for k, t in tensors.items():
                dist.barrier(group=gloo)
                start = time.perf_counter()
                for _ in range(a.iters):
                    dist.all_reduce(t, group=groups[k])
                best[k] = min(best[k], (time.perf_counter() - start) / a.iters * 1e6)
        row = {"bytes": nbytes, "iters": a.iters, "rounds": a.rounds}
        for k, t in tensors.items():
            pattern = torch.arange(count, dtype=torch.int64) % 7 + 1
            t.copy_(pattern * (rank + 1))
            dist.all_reduce(t, group=groups[k])
            wrong = torch.tensor([int((t != pattern * (n * (n + 1) // 2)).sum())])
            dist.all_reduce(wrong, group=gloo)
            us = max_over_ranks(best[k], gloo)
            algbw = nbytes / us / 1e3
            row[k] = {"time_us": us, "busbw_GBps": algbw * factor, "wrong": int(wrong.item())}
        rows.append(row)
        if rank == 0:
            print(f"{nbytes:>11} B  " + "  ".join(
                f"{k} {row[k]['time_us']:>9.0f} us {row[k]['busbw_GBps']:>6.2f} GB/s"
                f" (wrong {row[k]['wrong']})" for k in tensors), flush=True)
        del tensors
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": n, "torch": torch.__version__, "rows": rows}, f, indent=1)
    dist.barrier(group=gloo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
