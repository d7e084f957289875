#!/usr/bin/python3
"""torch.distributed all_reduce over Gloo (f32 sum), timed as strait-bench times strait.

For each size: WARMUP calls, a barrier, ITERS timed calls; a rank's time is the mean per call, the
reported time the maximum over ranks. algbw = size / time, busbw = algbw * 2(n-1)/n (nccl-tests).
After timing, one call on exact small integers checks the sums (#wrong). Starts N local processes
itself (no torchrun), on 127.0.0.1, with OMP_NUM_THREADS=1 as torchrun sets it. With --launched it
is one rank of a job started by a launcher instead (torchrun's RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), e.g. across the sites of the WAN testbed (set GLOO_SOCKET_IFNAME=wan0 there).

  /usr/bin/python3 bench/gloo_allreduce.py -np 2 -b 8 -e 256M -f 2 -n 20 -w 5 --json out.json
  GLOO_SOCKET_IFNAME=wan0 strait wan run -- /usr/bin/python3 bench/gloo_allreduce.py --launched \
      -b 64M -e 64M -n 3 -w 1

Use Debian's python3-torch (/usr/bin/python3), not another python on PATH.
"""
import argparse
import json
import os
import socket
import sys
import time

from bench_sizes import parse_size  # bench/bench_sizes.py, beside this file


def sizes(lo, hi, factor):
    s = lo
    while s <= hi:
        yield s
        s *= factor


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if args.launched:
        dist.init_process_group("gloo", init_method="env://")
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=args.np)
    n = dist.get_world_size()
    rows = []
    big = torch.empty(args.e // 4, dtype=torch.float32)
    # As nccl-tests (and strait-bench) do: warm up at the largest size, then the smallest.
    all_sizes = list(sizes(args.b, args.e, args.f))
    big.fill_(1.0)
    for nbytes in (all_sizes[-1], all_sizes[0]):
        for _ in range(args.w):
            dist.all_reduce(big[:nbytes // 4])
    for nbytes in sizes(args.b, args.e, args.f):
        count = nbytes // 4
        t = big[:count]
        t.fill_(1.0)
        for _ in range(args.w):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.n):
            dist.all_reduce(t)
        mine = torch.tensor([(time.perf_counter() - start) / args.n * 1e6], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        time_us = mine.item()
        # Check: rank r sends (r + 1) * (i % 7 + 1), exact in f32.
        pattern = torch.arange(count, dtype=torch.int64) % 7 + 1
        t.copy_(pattern * (rank + 1))
        dist.all_reduce(t)
        wrong = torch.tensor([int((t != pattern * (n * (n + 1) // 2)).sum())], dtype=torch.int64)
        dist.all_reduce(wrong)
        algbw = nbytes / (time_us * 1e3)
        row = {"bytes": nbytes, "count": count, "time_us": time_us, "algbw_gbs": algbw,
               "busbw_gbs": algbw * 2 * (n - 1) / n, "wrong": int(wrong.item())}
        rows.append(row)
        if rank == 0:
            print(f"  {nbytes:10d} {count:12d} {time_us:10.2f} {algbw:8.2f} {row['busbw_gbs']:8.2f}"
                  f" {row['wrong']:6d}", flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"peer": f"torch {torch.__version__} gloo", "ranks": n, "iters": args.n,
                       "warmup": args.w, "rows": rows}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-np", type=int, default=2, help="ranks (local processes)")
    p.add_argument("-b", type=parse_size, default=8, help="smallest size in bytes")
    p.add_argument("-e", type=parse_size, default=256 << 20, help="largest size in bytes")
    p.add_argument("-f", type=int, default=2, help="size factor")
    p.add_argument("-n", type=int, default=20, help="timed calls per size")
    p.add_argument("-w", type=int, default=5, help="warm-up calls per size")
    p.add_argument("--json", help="write the rows here (rank 0)")
    p.add_argument("--launched", action="store_true",
                   help="be one rank of a launched job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
    args = p.parse_args()
    if args.b < 4 or args.b > args.e or args.f < 2 or args.n < 1 or args.w < 0 or args.np < 1:
        p.error("need 4 <= -b <= -e, -f >= 2, -n >= 1, -w >= 0, -np >= 1")
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.multiprocessing as mp

    header = [f"# torch {torch.__version__} gloo all_reduce f32 sum, {{}} ranks, {args.w} warm-up"
              f" + {args.n} timed calls; time: max over ranks",
              f"# {'size (B)':>10} {'count':>12} {'time (us)':>10} {'algbw':>8} {'busbw':>8} #wrong"]
    if args.launched:
        rank = int(os.environ["RANK"])
        if rank == 0:
            print(header[0].format(os.environ["WORLD_SIZE"]) + "\n" + header[1], flush=True)
        worker(rank, args, None)
        return 0
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(header[0].format(args.np) + "\n" + header[1], flush=True)
    mp.spawn(worker, args=(args, port), nprocs=args.np, join=True)


if __name__ == "__main__":
    sys.exit(main())
