"""The ops added for torch's CPU backend surface, each against Gloo on the same inputs (or a
float64 / naive reference where Gloo lacks the op), in one job of N ranks:
`strait run -n N -- /usr/bin/python3 python/tests/more_ops.py`.

all_gather_coalesced (mixed dtypes, complex, empty); allgather_into_tensor_coalesced and
reduce_scatter_tensor_coalesced (methods only in torch 1.13: called on the group); sparse COO
all_reduce; BAND/BOR/BXOR on every integer dtype (and the error for floats); batch_isend_irecv
around a ring; recv from any source (the sender's rank from Work.source_rank()); monitored_barrier
passing, and failing with the missing rank named while the group stays usable;
_get_sequence_number_for_group (equal on every rank, growing); PREMUL_SUM in all_reduce and
reduce_scatter_tensor against a float64 reference (and refused for integers and reduce). Exits 0 when every check passed.
"""

import sys
from datetime import timedelta

import torch_job  # torch (or skip), strait's default group, a gloo group

import torch
import torch.distributed as dist

RANK, P, GLOO = torch_job.start()
STRAIT = dist.group.WORLD
PG = dist.distributed_c10d._get_default_group()
CHECKS = torch_job.Checks()
check = CHECKS.check
failures = CHECKS.failures


def same(what, got, ref):
    got = got if isinstance(got, (list, tuple)) else [got]
    ref = ref if isinstance(ref, (list, tuple)) else [ref]
    ok = len(got) == len(ref) and all(
        a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) for a, b in zip(got, ref))
    check(what, ok, f"got {got}, reference {ref}" if not ok else "")


def data(seed, n, dtype, rank=RANK):
    g = torch.Generator().manual_seed(seed * 100 + rank)
    if dtype.is_complex:
        return torch.randn(n, generator=g).to(dtype) * (1 + 2j)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        return torch.randint(-50, 50, (n,), generator=g).to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, (n,), generator=g).to(dtype)
    return torch.randint(-2**30, 2**30, (n,), generator=g).to(dtype)


def all_gather_coalesced():
    # torch's API takes one dtype per call; the sizes include an empty tensor.
    for seed, dtype in enumerate((torch.float32, torch.int64, torch.complex64, torch.uint8)):
        inputs = [data(10 + seed, 7, dtype).reshape(-1, 1), torch.empty(0, dtype=dtype),
                  data(20 + seed, 1000, dtype), data(30 + seed, 3, dtype).reshape(1, 3)]
        for async_op in (False, True):
            outs = [[torch.empty_like(t) for t in inputs] for _ in range(P)]
            w = dist.all_gather_coalesced(outs, inputs, async_op=async_op)
            if async_op:
                w.wait()
            ref = [[torch.empty_like(t) for t in inputs] for _ in range(P)]
            dist.all_gather_coalesced(ref, inputs, group=GLOO)
            for r in range(P):
                same(f"all_gather_coalesced {dtype} async={async_op} rank {r}", outs[r], ref[r])


def tensor_coalesced():
    ins = [data(20, 4, torch.float32), data(21, 6, torch.int32), data(22, 1, torch.float64)]
    outs = [torch.empty(t.numel() * P, dtype=t.dtype) for t in ins]
    PG.allgather_into_tensor_coalesced(outs, ins).wait()
    for i, t in enumerate(ins):
        parts = [torch.empty_like(t) for _ in range(P)]
        dist.all_gather(parts, t, group=GLOO)  # gloo has no all_gather_into_tensor in 1.13
        same(f"allgather_into_tensor_coalesced {i}", outs[i], torch.cat(parts))
    for dtype in (torch.float32, torch.int64):
        ins = [data(30, 3 * P, dtype), data(31, 5 * P, dtype).reshape(P, 5)]
        outs = [torch.empty(3, dtype=dtype), torch.empty(1, 5, dtype=dtype)]
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = dist.ReduceOp.SUM
        PG.reduce_scatter_tensor_coalesced(outs, ins, opts).wait()
        for i, (o, t) in enumerate(zip(outs, ins)):
            ref = t.clone()
            dist.all_reduce(ref, group=GLOO)  # gloo has no reduce_scatter in 1.13
            same(f"reduce_scatter_tensor_coalesced {dtype} {i}", o,
                 ref.reshape(P, -1)[RANK].reshape(o.shape))


def sparse():
    for seed, dense_dims in ((40, ()), (41, (3,))):
        g = torch.Generator().manual_seed(seed * 10 + RANK)
        nnz = 2 + RANK
        idx = torch.randint(0, 6, (2, nnz), generator=g)
        val = torch.randint(-9, 9, (nnz,) + dense_dims, generator=g).float()
        t = torch.sparse_coo_tensor(idx, val, (6, 6) + dense_dims)
        mine, ref = t.clone(), t.clone()
        dist.all_reduce(mine)
        dist.all_reduce(ref, group=GLOO)
        same(f"sparse all_reduce dense dims {dense_dims}", mine.to_dense(), ref.to_dense())
    empty = torch.sparse_coo_tensor(torch.empty(2, 0, dtype=torch.int64), torch.empty(0), (4, 4))
    dist.all_reduce(empty)
    check("sparse all_reduce of nothing", empty.to_dense().abs().sum().item() == 0)


def bitwise():
    ops = (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR)
    for dtype in (torch.int8, torch.uint8, torch.int32, torch.int64):
        for op in ops:
            for n in (1, 33, 4099):
                x = data(50 + n, n, dtype)
                mine, ref = x.clone(), x.clone()
                dist.all_reduce(mine, op=op)
                dist.all_reduce(ref, op=op, group=GLOO)
                same(f"all_reduce {op} {dtype} n={n}", mine, ref)
        x = data(60, 8, dtype)
        red = x.clone()
        dist.reduce(red, dst=0, op=dist.ReduceOp.BXOR)
        naive = data(60, 8, dtype, rank=0)
        for r in range(1, P):
            naive = naive ^ data(60, 8, dtype, rank=r)
        if RANK == 0:
            same(f"reduce BXOR {dtype} (naive reference)", red, naive)
    try:
        dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND)
        check("BAND of float32 refused", False, "accepted")
    except RuntimeError as e:
        check("BAND of float32 refused", "integer" in str(e), str(e))


def batch_p2p():
    right, left = (RANK + 1) % P, (RANK - 1) % P
    send = [data(70, 10, torch.float32), data(71, 3, torch.int64)]
    recv = [torch.empty(10), torch.empty(3, dtype=torch.int64)]
    ops = [dist.P2POp(dist.isend, send[0], right), dist.P2POp(dist.irecv, recv[0], left),
           dist.P2POp(dist.isend, send[1], right, tag=1),
           dist.P2POp(dist.irecv, recv[1], left, tag=1)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same("batch_isend_irecv ring", recv, [data(70, 10, torch.float32, left),
                                          data(71, 3, torch.int64, left)])


def any_source():
    if RANK == 0:
        seen = set()
        for _ in range(P - 1):
            t = torch.empty(4)
            w = dist.irecv(t)  # no src: from any rank
            w.wait()
            src = w.source_rank()
            seen.add(src)
            same(f"recv from any source: data of rank {src}", t, data(80, 4, torch.float32, src))
        check("recv from any source: every sender once", seen == set(range(1, P)), str(seen))
        t = torch.empty(4)
        src = dist.recv(t, tag=5)
        check("recv without src returns the sender", src == 1, str(src))
        same("recv without src: the data", t, data(81, 4, torch.float32, 1))
    else:
        dist.send(data(80, 4, torch.float32), 0)
        if RANK == 1:
            dist.send(data(81, 4, torch.float32), 0, tag=5)


def monitored():
    dist.monitored_barrier(timeout=timedelta(seconds=30))
    dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=True)
    check("monitored_barrier passes", True)
    if RANK != P - 1:  # rank P-1 stays away: rank 0 names it, the others hear from rank 0
        try:
            dist.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=True)
            check("monitored_barrier with a rank missing fails", False, "it passed")
        except RuntimeError as e:
            want = f"Ranks {P - 1} failed to pass monitoredBarrier" if RANK == 0 else \
                "successfully reached monitoredBarrier"
            check("monitored_barrier names the missing rank", want in str(e), str(e))
    dist.barrier(group=GLOO)
    x = torch.ones(3) * RANK
    dist.all_reduce(x)
    same("allreduce after a failed monitored_barrier", x, torch.ones(3) * sum(range(P)))


def sequence_numbers():
    a = PG._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(2))
    b = PG._get_sequence_number_for_group()
    check("sequence number grows with a collective", b > a, f"{a} then {b}")
    seqs = torch.tensor([a, b])
    gathered = [torch.empty_like(seqs) for _ in range(P)]
    dist.all_gather(gathered, seqs, group=GLOO)
    check("sequence numbers equal on every rank", all(torch.equal(g, seqs) for g in gathered),
          str(gathered))


def premul_sum():
    # Gloo has no PREMUL_SUM: the reference is the float64 sum over ranks of factor * input.
    for factor in (0.25, torch.tensor(3.0)):
        try:
            op = dist._make_nccl_premul_sum(factor)
        except TypeError:  # torch 1.13 takes a list of one tensor per device
            op = dist._make_nccl_premul_sum([factor])
        f = float(factor)
        # bfloat16 only with 0.25: every partial sum is then exact in its 8 bits
        for dtype in (torch.float32, torch.float64) + ((torch.bfloat16,) if f == 0.25 else ()):
            x = data(70, 37, dtype)
            dist.all_reduce(x, op=op)
            ref = sum(data(70, 37, torch.float64, rank=r) * f for r in range(P))
            same(f"all_reduce PREMUL_SUM({f}) {dtype} (float64 reference)", x, ref.to(dtype))
        inp = data(71, 5 * P, torch.float32)
        before = inp.clone()
        out = torch.empty(5)
        dist.reduce_scatter_tensor(out, inp, op=op)
        ref = sum(data(71, 5 * P, torch.float64, rank=r) * f for r in range(P))
        same(f"reduce_scatter_tensor PREMUL_SUM({f})", out,
             ref[RANK * 5:(RANK + 1) * 5].float())
        same("reduce_scatter_tensor PREMUL_SUM leaves its input", inp, before)
    for what, call in (("int64", lambda op: dist.all_reduce(torch.ones(3, dtype=torch.int64),
                                                             op=op)),
                       ("reduce", lambda op: dist.reduce(torch.ones(3), dst=0, op=op))):
        try:
            call(dist._make_nccl_premul_sum(2.0))
            check(f"PREMUL_SUM of {what} refused", False, "accepted")
        except (RuntimeError, ValueError) as e:
            check(f"PREMUL_SUM of {what} refused", "PREMUL_SUM" in str(e), str(e))


for part in (all_gather_coalesced, tensor_coalesced, sparse, bitwise, batch_p2p, any_source,
             monitored, sequence_numbers, premul_sum):
    try:
        part()
    except Exception as e:  # one broken op must not hide the others' results
        failures.append(f"{part.__name__}: {type(e).__name__}: {e}")
    dist.barrier(group=GLOO)

print(f"rank {RANK} of {P}: {CHECKS.count} checks, {len(failures)} failed", flush=True)
for f in failures[:40]:
    print(f"rank {RANK}: FAIL {f}", flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
