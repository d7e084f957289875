#!/usr/bin/python3
"""CPU per allreduce, strait against Gloo, with a compute thread beside it: what a backend takes from
training while its bytes cross a slow link. One rank of a 2-rank job under `strait wan run` (or
`strait run`); rank 0 prints the figures.

In ROUNDS rounds, for each backend in turn: a compute thread starts (torch.mm of 256 x 256 in a loop,
one intra-op thread), REPS allreduces of NBYTES are posted async and waited for, the thread stops.
Printed per round: ms per allreduce, the compute thread's iterations per second (its progress beside
the backend), and the CPU ms per allreduce of every other thread of the process (from /proc, named:
strait's engine thread is strait-progress).
  sudo build/strait wan run --rate 500mbit --ranks-per-site 1 -- /usr/bin/python3 bench/allreduce_cpu.py
Environment: NBYTES (4 MiB), REPS (12), ROUNDS (2), HOG (1: the compute thread; 0: none),
BACKENDS (gloo,strait). GLOO_SOCKET_IFNAME=wan0 on the WAN testbed.
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import strait.torch  # noqa: E402,F401 (registers the backend)


def thread_ticks():
    """{"name:tid": CPU clock ticks} of every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended
            continue
        out[f"{name}:{tid}"] = int(fields[11]) + int(fields[12])  # utime + stime
    return out


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    n = int(os.environ.get("NBYTES", str(4 << 20))) // 4
    reps = int(os.environ.get("REPS", "12"))
    hog = os.environ.get("HOG", "1") != "0"
    ms_per_tick = 1000.0 / os.sysconf("SC_CLK_TCK")
    rows = []
    for backend in os.environ.get("BACKENDS", "gloo,strait").split(",") * int(
            os.environ.get("ROUNDS", "2")):
        pg = dist.new_group(backend=backend)
        dist.all_reduce(torch.ones(n), group=pg)
        dist.barrier()
        stop = threading.Event()
        iters = [0]
        hog_tid = [None]

        def compute():
            hog_tid[0] = threading.get_native_id()
            a, b = torch.randn(256, 256), torch.randn(256, 256)
            while not stop.is_set():
                torch.mm(a, b)
                iters[0] += 1

        before = thread_ticks()
        thread = threading.Thread(target=compute) if hog else None
        if thread:
            thread.start()
            time.sleep(0.05)
        start = time.perf_counter()
        iters[0] = 0
        works = [dist.all_reduce(torch.ones(n), group=pg, async_op=True) for _ in range(reps)]
        for w in works:
            w.wait()
        elapsed = time.perf_counter() - start
        after = thread_ticks()
        rate = iters[0] / elapsed
        stop.set()
        if thread:
            thread.join()
        others = {k: (v - before.get(k, 0)) * ms_per_tick / reps for k, v in after.items()
                  if not k.endswith(f":{hog_tid[0]}") and v != before.get(k, 0)}
        rows.append((backend, elapsed / reps * 1e3, rate, sum(others.values()), others))
        dist.barrier()
    if dist.get_rank() == 0:
        print(f"# {n * 4} B allreduces, {reps} a round, compute thread: {'yes' if hog else 'no'}")
        for backend, ms, rate, cpu, others in rows:
            detail = ", ".join(f"{k} {v:.1f}" for k, v in sorted(others.items()))
            print(f"{backend:7s} {ms:7.1f} ms/allreduce  compute {rate:6.0f} it/s  "
                  f"other threads {cpu:5.1f} CPU ms/allreduce ({detail})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
