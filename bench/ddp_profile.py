#!/usr/bin/python3
"""Where a DDP step of examples/ddp_gpt.py spends its time: per-phase medians (forward, backward
including the wait for the allreduces, optimizer) and, per gradient bucket, the time from handing
it to the communication to its future completing, through a timing wrapper around
  --comm default   torch's allreduce_hook over the process group (what DDP does without a hook)
  --comm CODEC     strait.torch.hooks.compressed_allreduce with that codec spec ("none": plain)
plus the CPU seconds of every thread of rank 0 over the run (a polling progress thread shows).
Run like the example: `build/strait run -n 2 -- /usr/bin/python3 bench/ddp_profile.py
--backend strait --comm default --steps 30 [model flags]`; prints one JSON object (rank 0).
"""

import json
import os
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
import ddp_gpt  # noqa: E402


def thread_cpu():
    """{"name/tid": CPU seconds} of this process's threads, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = open(f"/proc/self/task/{tid}/stat").read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        f = stat[stat.rindex(")") + 2:].split()
        out[f"{name}/{tid}"] = round((int(f[11]) + int(f[12])) / tick, 2)
    return out


def main():
    argv = sys.argv[1:]
    comm = "default"
    if "--comm" in argv:
        i = argv.index("--comm")
        comm = argv[i + 1]
        del argv[i:i + 2]
    args = ddp_gpt.parse_args(argv + ["--quiet"])
    torch.set_num_threads(args.threads)
    ddp_gpt.init_group(args.backend)
    lat = []  # (bucket index, elements, seconds from submit to completion)
    lock = threading.Lock()
    if comm == "default":
        state, inner = dist.group.WORLD, default_hooks.allreduce_hook
    else:
        from strait.torch import hooks
        state = hooks.CompressionState(codec=comm, start_iter=args.start_iter)
        inner = hooks.compressed_allreduce

    def timed(st, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        t0 = time.perf_counter()
        idx, n = bucket.index(), bucket.buffer().numel()
        fut = inner(st, bucket)

        def done(f):
            with lock:
                lat.append((idx, n, time.perf_counter() - t0))
            return f.value()
        return fut.then(done)

    summary = ddp_gpt.train(args, hook=(state, timed))
    if dist.get_rank() == 0:
        skip = 2 * len({i for i, _, _ in lat})  # the first steps (bucket rebuild)
        per = {}
        for i, n, t in lat[skip:]:
            per.setdefault((i, n), []).append(t)
        summary["bucket_latency_ms"] = {f"{i}:{n}": round(statistics.median(v) * 1e3, 2)
                                        for (i, n), v in sorted(per.items())}
        summary["thread_cpu_s"] = thread_cpu()
        summary["comm"] = comm
        del summary["losses"], summary["step_times"]
        print(json.dumps(summary), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
