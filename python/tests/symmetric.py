"""strait.torch.empty (symmetric memory) in one job of N ranks:
`strait run -n N -- /usr/bin/python3 python/tests/symmetric.py`.

dist.all_reduce on a strait.torch.empty tensor against a float64 reference, read in place from the
peers (the stats' symmetricBytes grows; the single-copy allreduce is on by rule, STRAIT_TUNE);
a view keeps the buffer alive after its base is deleted and reduces correctly; the buffer (its
memfd and mappings) goes when the last view does; sizes as ints or a tuple and other dtypes;
a gloo group is a ValueError naming init_process_group("strait"); a group shut down with a
buffer still referenced frees it, and dropping the tensor afterwards frees nothing twice.
Exits 0 when every check passed.
"""

import ctypes
import gc
import os
import sys

os.environ["STRAIT_TUNE"] = "allreduce:1M-inf:single_copy"  # read when the group is created

import torch_job  # noqa: E402 (torch (or skip), strait's default group, a gloo group)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import strait.torch  # noqa: E402
from strait import _capi as C  # noqa: E402

RANK, P, GLOO = torch_job.start()
PG = dist.distributed_c10d._get_default_group()
CHECKS = torch_job.Checks()
check = CHECKS.check
failures = CHECKS.failures


def memfds():
    """This process's strait symmetric memfds, and the lines of its maps that map one."""
    fds = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:strait-symmetric")
        except OSError:
            pass
    with open("/proc/self/maps") as f:
        maps = sum("memfd:strait-symmetric" in line for line in f)
    return fds, maps


def symmetric_bytes(pg):
    s = C.Stats.new()
    C.check(C.straitCommGetStats(pg._comm, ctypes.byref(s)), pg._comm, "straitCommGetStats")
    return s.symmetricBytes


def data(seed, shape, rank):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(shape, generator=g)


def reference(seed, shape):
    return sum(data(seed, shape, r).double() for r in range(P))


def close(what, got, ref):
    err = (got.double() - ref).abs().max().item()
    check(what, err <= 1e-5 * max(1.0, ref.abs().max().item()), f"max error {err}")


base = memfds()
shape = (1024, 1031)  # 4.2 MB: over the single-copy rule's 1 MiB
t = strait.torch.empty(*shape)
check("shape and dtype", t.shape == shape and t.dtype == torch.float32, f"{t.shape} {t.dtype}")
check("zero-filled", bool((t == 0).all()))
check("one memfd, mapped by every rank", memfds() == (base[0] + 1, base[1] + P),
      f"{memfds()} from {base}")
t.copy_(data(1, shape, RANK))
before = symmetric_bytes(PG)
dist.all_reduce(t)
close("all_reduce", t, reference(1, shape))
# Chunk `rank` of every peer's input and every peer's reduced chunk, read in place.
chunk = t.numel() // P * t.element_size()
check("read in place", symmetric_bytes(PG) - before >= 2 * chunk * (P - 1),
      f"{symmetric_bytes(PG) - before} bytes, expected >= {2 * chunk * (P - 1)}")

# A view keeps the buffer: reduce through it after the base is gone.
v = t[512:]
del t
gc.collect()
check("a view keeps the buffer", memfds() == (base[0] + 1, base[1] + P), f"{memfds()}")
v.copy_(data(2, v.shape, RANK))
before = symmetric_bytes(PG)
dist.all_reduce(v)
close("all_reduce of a view", v, reference(2, v.shape))
check("a view is read in place", symmetric_bytes(PG) > before)
del v
gc.collect()
check("freed with its last view", memfds() == base, f"{memfds()}, expected {base}")

# Ordinary tensors still work beside it, and read nothing in place.
o = data(3, (300000,), RANK)
before = symmetric_bytes(PG)
dist.all_reduce(o)
close("all_reduce of an ordinary tensor", o, reference(3, (300000,)))
check("an ordinary tensor is not read in place", symmetric_bytes(PG) == before)

# Sizes as a tuple, other dtypes, empty tensors.
for dtype in (torch.float64, torch.bfloat16, torch.int32):
    x = strait.torch.empty((3, 5), dtype=dtype)
    check(f"{dtype} shape", x.shape == (3, 5) and x.dtype == dtype and x.is_contiguous())
    x.fill_(RANK + 1)
    dist.all_reduce(x)
    check(f"{dtype} all_reduce", bool((x == P * (P + 1) // 2).all()), f"{x}")
    del x
check("empty tensor", strait.torch.empty(0, 4).shape == (0, 4))
gc.collect()
check("all freed", memfds() == base, f"{memfds()}, expected {base}")

# Groups that are not strait's.
for name, group in (("gloo", GLOO),):
    try:
        strait.torch.empty(4, group=group)
        check(f"{name} group refused", False, "no error")
    except ValueError as e:
        check(f"{name} group refused", 'init_process_group("strait")' in str(e), str(e))
try:
    strait.torch.empty(-1)
    check("negative size refused", False, "no error")
except ValueError as e:
    check("negative size refused", "negative" in str(e), str(e))

# A group shut down with a buffer still referenced: its destruction frees it; dropping the tensor
# afterwards frees nothing again (and the default group's buffers are untouched).
g = dist.new_group(backend="strait")
kept = strait.torch.empty(1 << 16, group=g)
y = strait.torch.empty(1 << 16)
y.fill_(1.0)
check("two buffers", memfds() == (base[0] + 2, base[1] + 2 * P), f"{memfds()}")
dist.barrier(group=g)
g.shutdown()
check("shutdown freed the group's buffer", memfds() == (base[0] + 1, base[1] + P), f"{memfds()}")
del kept
gc.collect()
dist.all_reduce(y)
check("the default group's buffer is intact", bool((y == P).all()))
del y
gc.collect()
check("all freed at the end", memfds() == base, f"{memfds()}, expected {base}")

dist.barrier()
if failures:
    print(f"rank {RANK}: {len(failures)} of {CHECKS.count} checks FAILED:\n  " + "\n  ".join(failures),
          flush=True)
    sys.exit(1)
print(f"rank {RANK}: ok ({CHECKS.count} checks)", flush=True)
