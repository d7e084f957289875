"""DDP without a comm hook overlaps its bucket allreduces with backward (STRAIT_TORCH_CPP_WORK
pending, the default), checked by order of events, not by timing:

1. The first bucket's allreduce returns to DDP's Reducer (C++) before the operation can have
   finished: rank 1 enters that allreduce only after rank 0 has computed a later gradient (a
   store key set in that gradient's hook), so rank 0's Work must be pending at return, and
   backward must go on computing gradients after it (tensor hooks record when each parameter's
   gradient is computed). With the finished path rank 0's call would block until rank 1 joined,
   and rank 1 would wait for the key in vain (HANDSHAKE_S): the test fails instead of hanging.
2. Under the torch profiler each bucket's allreduce is a span strait::allreduce bytes=N whose
   bytes add up to the gradients' bytes, the first starting before backward's last gradient.
3. The parameters after a few steps equal gloo's bit for bit (2 ranks: one addition per element),
   also with DDP's static_graph, find_unused_parameters, gradient_as_bucket_view, no_sync and a
   buffer broadcast every forward (more C++ callers of the group, all given pending Works).
4. C++ callers get the compiled extension's Works when it was built (STRAIT_TORCH_CPP_WORK
   pending), the Python completer's with STRAIT_TORCH_CPP_WORK=python; CTest runs both.
Run as 2 ranks: `strait run -n 2 -- /usr/bin/python3 python/tests/ddp_overlap.py`.
"""

import datetime
import os
import sys

import torch_job  # torch (or skip), strait's default group, a gloo group

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

from strait.torch import backend

RANK, _, GLOO = torch_job.start()
dist._DEFAULT_FIRST_BUCKET_BYTES = 4096  # DDP's first bucket (1 MiB) would hold the whole model
STORE = dist.distributed_c10d._get_default_store()
HANDSHAKE_S = 20
problems = []


def model_and_ddp(group, seed=1234, **options):
    torch.manual_seed(seed + RANK)  # different initial weights: DDP must broadcast rank 0's
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4))
    model.register_buffer("scale", torch.full((3,), RANK + 1.0))  # broadcast every forward
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.004,
                                              **options)  # 4 KB: several buckets
    return model, ddp


def step(ddp, opt, g):
    opt.zero_grad()
    ddp(torch.randn(8, 16, generator=g)).square().mean().backward()
    opt.step()


def check_pending():
    """Claim 1: the second step's backward (the first has one bucket: DDP buckets by size from
    the second on), with the first allreduce's handshake: rank 1 holds its backward in the first
    gradient's hook until rank 0 reaches the hook of the first gradient outside the first
    bucket, which comes after rank 0 has called the first bucket's allreduce. With a finished
    Work that call would not return before rank 1 joined it."""
    model, ddp = model_and_ddp(dist.group.WORLD)
    opt, g = torch.optim.SGD(ddp.parameters(), lr=0.1), torch.Generator().manual_seed(7)
    step(ddp, opt, g)
    events = []
    params = list(model.parameters())

    def hold(grad):
        try:
            STORE.wait(["overlap/returned"], datetime.timedelta(seconds=HANDSHAKE_S))
        except RuntimeError:
            problems.append(f"rank 0 did not go on with backward within {HANDSHAKE_S} s after "
                            "calling the first bucket's allreduce, which rank 1 had not joined: "
                            "the Reducer got a finished Work (no overlap)")
        return grad

    def release(grad):
        events.append(("returned", None))
        STORE.set("overlap/returned", "1")
        return grad

    handles = [p.register_hook(lambda grad, i=i: events.append(("grad", i)) or grad)
               for i, p in enumerate(params)]
    # DDP's buckets from the second step: parameters in backward order (reversed), cut by size
    # as the Reducer cuts them; rank 0 releases rank 1 in the hook of the first gradient after
    # the first bucket's (the allreduce of that bucket has been called by then).
    order = list(reversed(range(len(params))))
    cap = int(0.004 * 1024 * 1024)
    buckets, _ = dist._compute_bucket_assignment_by_size([params[i] for i in order],
                                                         [dist._DEFAULT_FIRST_BUCKET_BYTES, cap])
    after = order[len(buckets[0])]
    handles.append(params[order[0]].register_hook(hold) if RANK == 1
                   else params[after].register_hook(release))
    try:
        step(ddp, opt, g)
    finally:
        for h in handles:
            h.remove()
    if RANK != 0:
        return
    kinds = [e[0] for e in events]
    if "returned" not in kinds:
        problems.append(f"the releasing gradient hook did not run: {events}")
        return
    at = kinds.index("returned")
    later = [e for e in events[at:] if e[0] == "grad"]
    if not later:
        problems.append(f"no gradient was computed after the first allreduce returned: backward "
                        f"waited for it (events {events})")
    print(f"rank 0: first allreduce returned pending, then {len(later)} of "
          f"{len(params)} gradients were computed", flush=True)


def check_spans():
    """Claim 2: one step under the profiler."""
    model, ddp = model_and_ddp(dist.group.WORLD)
    opt, g = torch.optim.SGD(ddp.parameters(), lr=0.1), torch.Generator().manual_seed(7)
    step(ddp, opt, g)  # one bucket in the first step, by size from the second
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(ddp, opt, g)
    evs = prof.events()
    spans = sorted((e for e in evs if e.name.startswith("strait::allreduce bytes=")),
                   key=lambda e: e.time_range.start)
    grads = [e for e in evs if e.name.startswith("autograd::engine::evaluate_function: ")
             and "AccumulateGrad" not in e.name]
    want = sum(p.numel() * p.element_size() for p in model.parameters())  # not the buffer
    got = sum(int(e.name.split("bytes=")[1]) for e in spans)
    if len(spans) < 2 or got != want:
        problems.append(f"profiler: {len(spans)} strait::allreduce spans of {got} bytes; want 2 "
                        f"or more buckets of {want} bytes in all")
    elif not grads or spans[0].time_range.start >= max(e.time_range.end for e in grads):
        problems.append("profiler: the first bucket's allreduce span does not start inside "
                        "backward")
    print(f"rank {RANK}: {len(spans)} strait::allreduce spans, {got} bytes", flush=True)


def train(group, steps=4, **options):
    model, ddp = model_and_ddp(group, **options)
    opt, g = torch.optim.SGD(ddp.parameters(), lr=0.1), torch.Generator().manual_seed(99 + RANK)
    for i in range(steps):
        if i == 1 and not options.get("static_graph"):  # torch 1.13 asserts on it with no_sync
            with ddp.no_sync():  # accumulates locally; the next step reduces the sum
                ddp(torch.randn(8, 16, generator=g)).square().mean().backward()
        step(ddp, opt, g)
    return [p.detach().clone() for p in model.parameters()] + [model.scale.clone()]


def check_path():
    """Which completer C++ callers get: the compiled one when the build made it
    (STRAIT_TEST_TORCH_EXT=1, set by CMake) unless STRAIT_TORCH_CPP_WORK=python asks otherwise."""
    from strait.torch import _work
    pg = dist.group.WORLD
    mode = _work.cpp_work_mode()
    want = os.environ.get("STRAIT_TEST_TORCH_EXT") == "1" and mode == "pending"
    if want and pg._native is None:
        problems.append(f"the compiled extension was built but not used: {_work.extension()[1]}")
    if mode == "python" and pg._native is not None:
        problems.append("STRAIT_TORCH_CPP_WORK=python but the compiled completer is used")
    # Whether DDP's bucket allreduces enter the Python method: not with the extension.
    calls = [0]
    original = backend.ProcessGroupStrait.allreduce

    def counted(self, tensors, opts=None):
        calls[0] += 1
        return original(self, tensors, opts)

    backend.ProcessGroupStrait.allreduce = counted
    try:
        model, ddp = model_and_ddp(pg)
        opt, g = torch.optim.SGD(ddp.parameters(), lr=0.1), torch.Generator().manual_seed(3)
        for _ in range(2):
            step(ddp, opt, g)
    finally:
        backend.ProcessGroupStrait.allreduce = original
    if want and calls[0]:
        problems.append(f"{calls[0]} of DDP's bucket allreduces entered the Python method "
                        "although the extension's C++ ProcessGroup was there")
    if not want and not calls[0]:
        problems.append("no DDP bucket allreduce reached the Python method without the extension")
    print(f"rank {RANK}: C++ callers get Works completed in "
          f"{'C++' if pg._native is not None else 'Python'}; {calls[0]} Python allreduce calls",
          flush=True)


check_path()
check_pending()
check_spans()
for options in ({}, {"static_graph": True}, {"find_unused_parameters": True},
                {"gradient_as_bucket_view": True}):
    got, ref = train(dist.group.WORLD, **options), train(GLOO, **options)
    bad = [i for i, (a, b) in enumerate(zip(got, ref)) if not torch.equal(a, b)]
    if bad:
        problems.append(f"DDP{options}: parameters {bad} differ from gloo's after 4 steps")
for p in problems:
    print(f"rank {RANK}: FAIL {p}", flush=True)
sys.exit(1 if problems else 0)
