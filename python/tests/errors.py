"""The strait backend's errors: wrong arguments fail at once with a message that says what was
wrong and what to do; strait's failures (Timeout, Mismatch) reach torch as RuntimeError carrying
strait's message, within the group's timeout, naming the rank. Run as 2 ranks:
`strait run -n 2 -- /usr/bin/python3 python/tests/errors.py`.
"""

import datetime
import sys
import time

import torch_job  # torch (or skip), strait's default group, a gloo group

import torch
import torch.distributed as dist

RANK, P, GLOO = torch_job.start()
assert P == 2, "run with 2 ranks"
failures = []


def expect_raises(what, fn, exc_type, *fragments):
    try:
        fn()
    except exc_type as e:
        text = str(e)
        missing = [f for f in fragments if f.lower() not in text.lower()]
        if missing:
            failures.append(f"{what}: the message lacks {missing}: {text!r}")
        else:
            print(f"rank {RANK}: {what}: {type(e).__name__}: {text.splitlines()[0][:200]}",
                  flush=True)
        return text
    except Exception as e:  # noqa: BLE001 (the wrong kind is a failure to report)
        failures.append(f"{what}: raised {type(e).__name__} ({e}), expected {exc_type.__name__}")
        return None
    failures.append(f"{what}: did not raise")
    return None


# ---- argument errors: raised locally before anything is sent, so the ranks stay in step ----
expect_raises("non-contiguous", lambda: dist.all_reduce(torch.zeros(4, 6).t()), ValueError,
              "not contiguous", ".contiguous()")
expect_raises("non-contiguous all_gather output",
              lambda: dist.all_gather([torch.zeros(6, 4).t() for _ in range(P)],
                                      torch.zeros(4, 6)), ValueError, "not contiguous")
expect_raises("mixed devices",
              lambda: dist.all_gather([torch.empty(3, device="meta") for _ in range(P)],
                                      torch.zeros(3)), ValueError, "one device", "meta")
expect_raises("unsupported device", lambda: dist.all_reduce(torch.empty(3, device="meta")),
              ValueError, "meta", "not supported")
expect_raises("sparse tensor with MAX",
              lambda: dist.all_reduce(torch.sparse_coo_tensor([[0]], [1.0], (4,)),
                                      op=dist.ReduceOp.MAX), ValueError, "sparse", "only SUM")
expect_raises("PREMUL_SUM outside all_reduce and reduce_scatter_tensor",
              lambda: dist.reduce(torch.ones(3), dst=0, op=dist._make_nccl_premul_sum(2.0)),
              ValueError, "PREMUL_SUM", "all_reduce", "SUM")
expect_raises("BAND of floats", lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
              RuntimeError, "band", "integer")
expect_raises("unsupported dtype bool",
              lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool)), TypeError, "torch.bool",
              "cannot be reduced")
expect_raises("AVG of integers",
              lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64), op=dist.ReduceOp.AVG),
              ValueError, "AVG", "floating-point")
expect_raises("uneven all_to_all_single without splits",
              lambda: dist.all_to_all_single(torch.empty(5), torch.empty(5)), ValueError,
              "multiple", "split_sizes")
# The group still works after all that.
t = torch.full((4,), float(RANK + 1))
dist.all_reduce(t)
if not torch.equal(t, torch.full((4,), 3.0)):
    failures.append(f"all_reduce after the argument errors gave {t}")

# ---- a peer that never calls: the async wait fails within the group's timeout, naming it ----
short = dist.new_group(backend="strait", timeout=datetime.timedelta(seconds=2))
if RANK == 0:
    work = dist.all_reduce(torch.ones(1000), group=short, async_op=True)
    start = time.monotonic()
    text = expect_raises("peer never calls", work.wait, RuntimeError, "strait", "rank 1")
    elapsed = time.monotonic() - start
    print(f"rank 0: the wait failed after {elapsed:.2f} s (group timeout 2 s)", flush=True)
    if elapsed > 2.0 + 3.0:
        failures.append(f"peer never calls: the wait took {elapsed:.1f} s, timeout 2 s")
    # The future of a failed operation fails too (DDP's path).
    fut_text = expect_raises("future of the failed operation", work.get_future().wait,
                             RuntimeError, "strait")
    # The group is unusable after a failure: the next call says so at once.
    expect_raises("call after the failure",
                  lambda: dist.all_reduce(torch.ones(2), group=short), RuntimeError, "strait")
dist.barrier(group=GLOO)

# ---- wait(timeout) shorter than the group's ----
other = dist.new_group(backend="strait", timeout=datetime.timedelta(seconds=60))
if RANK == 0:
    work = dist.all_reduce(torch.ones(10), group=other, async_op=True)
    start = time.monotonic()
    expect_raises("wait(timeout=0.5 s)",
                  lambda: work.wait(timeout=datetime.timedelta(milliseconds=500)), RuntimeError,
                  "timeout")
    elapsed = time.monotonic() - start
    if elapsed > 0.5 + 3.0:
        failures.append(f"wait(timeout=0.5 s) took {elapsed:.1f} s")
dist.barrier(group=GLOO)

# ---- ranks that disagree about an operation: Mismatch, strait's message on both ----
mism = dist.new_group(backend="strait", timeout=datetime.timedelta(seconds=10))
expect_raises("count mismatch",
              lambda: dist.all_reduce(torch.ones(100 + RANK), group=mism), RuntimeError,
              "strait")
dist.barrier(group=GLOO)

# ---- a rank that never joins a new group: creating it fails within the timeout (last: the
# ranks' group counters differ afterwards, so no group can be created after this) ----
if RANK == 0:
    start = time.monotonic()
    expect_raises("a rank never joins",
                  lambda: dist.new_group(backend="strait",
                                         timeout=datetime.timedelta(seconds=2)),
                  RuntimeError, "strait", "rank 0 of 2", "rank(s) 1")
    elapsed = time.monotonic() - start
    if elapsed > 2.0 + 5.0:
        failures.append(f"a rank never joins: creation failed after {elapsed:.1f} s, timeout 2 s")
dist.barrier(group=GLOO)

print(f"rank {RANK}: {len(failures)} failures", flush=True)
for f in failures:
    print(f"rank {RANK}: FAIL {f}", flush=True)
sys.exit(1 if failures else 0)
