"""Every collective of the strait backend against gloo on the same inputs, in one job.

Run as N ranks: `strait run -n N -- /usr/bin/python3 python/tests/collectives.py`. The default
group is strait's; a gloo group over the same ranks is the reference. f32, f64, i32 and i64 inputs
hold small integers, so every reduction is exact whatever its order and the results must be
bit-identical (torch.equal). Random floats are also compared, within a tolerance: strait's ring
and gloo add in different orders. bf16 and f16 allreduce (gloo refuses them) are compared with a
float64 reference. Collectives gloo lacks in torch 1.13 (reduce_scatter, the *_tensor forms, the
list all_to_all) are compared with what gloo's allreduce / all_gather / all_to_all_single give.
Exits 0 when every check passed; prints each failure.
"""

import sys

import torch_job  # torch (or skip), strait's default group, a gloo group

import torch
import torch.distributed as dist

RANK, P, GLOO = torch_job.start()
STRAIT = dist.group.WORLD
failures = []
checks = 0

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]
SIZES = [1, 5, 1000, 70001]
R = dist.ReduceOp


def inputs(seed, n, dtype, rank=RANK):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-20, 21, (n,), generator=g).to(dtype)


def expect_equal(what, got, ref, exact=True, rtol=0.0, atol=0.0):
    global checks
    checks += 1
    got = got if isinstance(got, (list, tuple)) else [got]
    ref = ref if isinstance(ref, (list, tuple)) else [ref]
    if len(got) != len(ref):
        failures.append(f"{what}: {len(got)} outputs, reference {len(ref)}")
        return
    for i, (a, b) in enumerate(zip(got, ref)):
        ok = (a.dtype == b.dtype and a.shape == b.shape and
              (torch.equal(a, b) if exact else torch.allclose(a, b, rtol=rtol, atol=atol)))
        if not ok:
            diff = (a.double() - b.double()).abs().max().item() if a.shape == b.shape else None
            failures.append(f"{what}: output {i} differs (dtype {a.dtype}/{b.dtype}, shape "
                            f"{tuple(a.shape)}/{tuple(b.shape)}, max |diff| {diff})")


def run(fn, group, async_op):
    """fn(group, async_op) -> (work or None, outputs); waits (async: on the work, via its future
    for every other call) and returns the outputs."""
    work, outs = fn(group, async_op)
    if async_op:
        assert work is not None, "async_op=True gave no work"
        if not hasattr(work, "get_future"):  # all_reduce_coalesced returns its future
            work.wait()
        elif run.count % 2:
            work.get_future().wait()
        else:
            work.wait()
        run.count += 1
    return outs


run.count = 0


def compare(name, fn, exact=True, **tol):
    for async_op in (False, True):
        got = run(fn, STRAIT, async_op)
        ref = run(fn, GLOO, False)
        expect_equal(f"{name} async={async_op}", got, ref, exact, **tol)


def case(seed, n, dtype):
    tag = f"n={n} {dtype}"
    x = inputs(seed, n, dtype)

    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    for op in ops:
        def f(g, a, op=op):
            t = x.clone() if op != R.PRODUCT else (x % 3).clone()
            return dist.all_reduce(t, op=op, group=g, async_op=a), t
        compare(f"all_reduce {op} {tag}", f)
    if dtype.is_floating_point:  # gloo has no AVG: SUM / P is exact for these inputs only if
        # P divides evenly, so compare with the float64 mean rounded once
        t = x.clone()
        dist.all_reduce(t, op=R.AVG)
        s = x.double().clone()
        dist.all_reduce(s, group=GLOO)
        expect_equal(f"all_reduce AVG {tag}", t, (s / P).to(dtype), exact=False,
                     rtol=1e-6, atol=1e-6)

    def coalesced(g, a):
        ts = [x.clone(), (x * 2).clone()[: max(1, n // 2)], x.clone().reshape(-1, 1)]
        if g is GLOO:  # per tensor: gloo's coalesced form is the same reduction
            for t in ts:
                dist.all_reduce(t, group=g)
            return None, ts
        return dist.all_reduce_coalesced(ts, group=g, async_op=a), ts
    compare(f"all_reduce_coalesced {tag}", coalesced)

    for root in range(P):
        compare(f"broadcast root={root} {tag}",
                lambda g, a, root=root: (lambda t: (dist.broadcast(t, root, group=g,
                                                                   async_op=a), t))(x.clone()))
        for op in (R.SUM, R.MAX):
            def red(g, a, root=root, op=op):
                t = x.clone()
                w = dist.reduce(t, root, op=op, group=g, async_op=a)
                return w, (t if RANK == root else x)  # non-roots: unspecified, not compared
            compare(f"reduce root={root} {op} {tag}", red)

        def gather(g, a, root=root):
            outs = [torch.empty_like(x) for _ in range(P)] if RANK == root else None
            w = dist.gather(x.clone(), outs, dst=root, group=g, async_op=a)
            return w, (outs if outs is not None else [])
        compare(f"gather root={root} {tag}", gather)

        def scatter(g, a, root=root):
            ins = [inputs(seed + 7, n, dtype, rank=r) for r in range(P)] if RANK == root else None
            out = torch.empty_like(x)
            return dist.scatter(out, ins, src=root, group=g, async_op=a), out
        compare(f"scatter root={root} {tag}", scatter)

    def allgather(g, a):
        outs = [torch.empty_like(x) for _ in range(P)]
        return dist.all_gather(outs, x, group=g, async_op=a), outs
    compare(f"all_gather {tag}", allgather)

    def allgather_packed(g, a):  # outputs back to back in one buffer: no staging copy
        flat = torch.empty(P * n, dtype=dtype)
        outs = list(flat.chunk(P))
        return dist.all_gather(outs, x, group=g, async_op=a), [flat]
    compare(f"all_gather packed {tag}", allgather_packed)

    def allgather_tensor(g, a):
        if g is GLOO:
            outs = [torch.empty_like(x) for _ in range(P)]
            dist.all_gather(outs, x, group=g)
            return None, torch.cat(outs)
        out = torch.empty(P * n, dtype=dtype)
        return dist._all_gather_base(out, x, group=g, async_op=a), out
    compare(f"all_gather_into_tensor {tag}", allgather_tensor)

    for op in (R.SUM, R.MIN):
        full = torch.cat([inputs(seed + 3, n, dtype, rank=RANK * 31 + r) for r in range(P)])

        def rs_ref(g):
            t = full.clone()
            dist.all_reduce(t, op=op, group=g)
            return None, t[RANK * n:(RANK + 1) * n].clone()

        def rs_list(g, a, op=op, full=full):
            if g is GLOO:
                return rs_ref(g)
            out = torch.empty(n, dtype=dtype)
            ins = [c.clone() for c in full.chunk(P)]
            return dist.reduce_scatter(out, ins, op=op, group=g, async_op=a), out
        compare(f"reduce_scatter {op} {tag}", rs_list)

        def rs_tensor(g, a, op=op, full=full):
            if g is GLOO:
                return rs_ref(g)
            out = torch.empty(n, dtype=dtype)
            return dist._reduce_scatter_base(out, full.clone(), op=op, group=g,
                                             async_op=a), out
        compare(f"reduce_scatter_tensor {op} {tag}", rs_tensor)

    # all_to_all_single: even, and uneven split sizes (rank r sends r + j + 1 rows to rank j)
    cols = 3
    send_splits = [(RANK + j) % 3 + 1 for j in range(P)]
    recv_splits = [(i + RANK) % 3 + 1 for i in range(P)]
    src = inputs(seed + 5, sum(send_splits) * cols, dtype).reshape(-1, cols)

    def a2a_uneven(g, a):
        out = torch.empty(sum(recv_splits), cols, dtype=dtype)
        return dist.all_to_all_single(out, src, recv_splits, send_splits, group=g,
                                      async_op=a), out
    compare(f"all_to_all_single uneven {tag}", a2a_uneven)
    even = inputs(seed + 6, P * n, dtype)

    def a2a_even(g, a):
        out = torch.empty_like(even)
        return dist.all_to_all_single(out, even, group=g, async_op=a), out
    compare(f"all_to_all_single even {tag}", a2a_even)

    def a2a_list(g, a):
        ins = list(src.split(send_splits))
        if g is GLOO:  # gloo has no list form in 1.13: the single form with the same splits
            out = torch.empty(sum(recv_splits), cols, dtype=dtype)
            dist.all_to_all_single(out, src, recv_splits, send_splits, group=g)
            return None, list(out.split(recv_splits))
        outs = [torch.empty(s, cols, dtype=dtype) for s in recv_splits]
        return dist.all_to_all(outs, ins, group=g, async_op=a), outs
    compare(f"all_to_all list uneven {tag}", a2a_list)

    # send / recv around the ring, tag by size
    def ring(g, a):
        out = torch.empty_like(x)
        nxt, prv = (RANK + 1) % P, (RANK - 1) % P
        if a:
            s = dist.isend(x.clone(), nxt, group=g, tag=n)
            r = dist.irecv(out, prv, group=g, tag=n)
            s.wait()
            r.wait()
        elif RANK % 2 == 0:
            dist.send(x.clone(), nxt, group=g, tag=n)
            dist.recv(out, prv, group=g, tag=n)
        else:
            dist.recv(out, prv, group=g, tag=n)
            dist.send(x.clone(), nxt, group=g, tag=n)
        return None, out
    for a in (False, True):
        expect_equal(f"send/recv async={a} {tag}", ring(STRAIT, a)[1], ring(GLOO, False)[1])


def random_floats():
    """Random (not integer) values: strait's order of addition differs from gloo's."""
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        g = torch.Generator().manual_seed(99 + RANK)
        x = torch.randn(100003, generator=g).to(dtype)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=GLOO)
        expect_equal(f"all_reduce random {dtype}", a, b, exact=False, rtol=tol, atol=tol)


def low_precision():
    """bf16 and f16 allreduce (SUM, AVG, MAX) against a float64 reduction of the same inputs."""
    for dtype, eps in ((torch.bfloat16, 2.0**-8), (torch.float16, 2.0**-11)):
        for n in (1, 999, 65536):
            g = torch.Generator().manual_seed(7 * n + RANK)
            x = (torch.randn(n, generator=g) * 4).to(dtype)
            everyone = [torch.empty(n, dtype=torch.float64) for _ in range(P)]
            dist.all_gather(everyone, x.double(), group=GLOO)
            stack = torch.stack(everyone)
            for op, ref in ((R.SUM, stack.sum(0)), (R.AVG, stack.mean(0)),
                            (R.MAX, stack.max(0).values)):
                for async_op in (False, True):
                    t = x.clone()
                    w = dist.all_reduce(t, op=op, async_op=async_op)
                    if async_op:
                        w.wait()
                    # each of the P - 1 additions rounds once, relative to the magnitudes added
                    bound = (P + 1) * eps * stack.abs().sum(0) + 1e-30
                    err = (t.double() - ref).abs()
                    global checks
                    checks += 1
                    if op == R.MAX:
                        if not torch.equal(t, ref.to(dtype)):
                            failures.append(f"all_reduce MAX {dtype} n={n}: differs from the "
                                            "float64 max")
                    elif not bool((err <= bound).all()):
                        i = int((err - bound).argmax())
                        failures.append(f"all_reduce {op} {dtype} n={n} async={async_op}: "
                                        f"element {i} is {t[i].item()}, float64 reference "
                                        f"{ref[i].item()} (bound {bound[i].item()})")


def op_forms():
    """The op given as a ReduceOp.RedOpType rather than the ReduceOp constants (the backend reads
    those by identity, anything else from the options)."""
    for op, ref_op in ((R.RedOpType.MAX, R.MAX), (R.RedOpType.PRODUCT, R.PRODUCT)):
        for async_op in (False, True):
            x = inputs(321, 100, torch.int64) % 3
            t, ref = x.clone(), x.clone()
            w = dist.all_reduce(t, op=op, async_op=async_op)
            if async_op:
                w.wait()
            dist.all_reduce(ref, op=ref_op, group=GLOO)
            expect_equal(f"all_reduce op={op} async={async_op}", t, ref)


def overlapping():
    """Several async operations in flight at once, waited in reverse order."""
    xs = [inputs(500 + i, 4096, torch.float32) for i in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in reversed(works):
        w.wait()
    for i, x in enumerate(xs):
        ref = inputs(500 + i, 4096, torch.float32)
        dist.all_reduce(ref, group=GLOO)
        expect_equal(f"overlapping all_reduce {i}", x, ref)


def cpp_callers():
    """allreduce as a C++ caller (DDP's Reducer) makes it: through the C++ virtual, which
    dist.ProcessGroup.allreduce calls. With the compiled extension a dense host tensor with SUM,
    PRODUCT, MIN or MAX goes from C++ to strait; AVG, the bitwise ops and strided tensors go on to
    the Python methods. Every form against gloo, with the wait through the returned Work."""
    global checks
    opts = dist.AllreduceOptions
    cases = [("sum f32", torch.float32, R.SUM, None), ("max i64", torch.int64, R.MAX, None),
             ("product f64", torch.float64, R.PRODUCT, None),
             ("bor i32", torch.int32, R.BOR, None)]
    if hasattr(R, "AVG"):
        cases.append(("avg f32", torch.float32, R.AVG, None))
    for name, dtype, op, _ in cases:
        x = inputs(700 + len(name), 3000, dtype) % 5 + 1
        t, ref = x.clone(), x.clone()
        o = opts()
        o.reduceOp = op
        work = dist.ProcessGroup.allreduce(STRAIT, [t], o)
        work.wait()
        if op == getattr(R, "AVG", None):  # gloo has no AVG: sum, then divide
            dist.all_reduce(ref, group=GLOO)
            ref /= P
        else:
            dist.all_reduce(ref, op=op, group=GLOO)
        avg = op == getattr(R, "AVG", None)  # strait divides as it sees fit: within an ulp
        tol = {"exact": False, "rtol": 1e-6} if avg else {}
        expect_equal(f"C++ caller allreduce {name}", t, ref, **tol)
        expect_equal(f"C++ caller allreduce {name}: Work.result", work.result()[0], ref, **tol)
    # A strided view: not the fast path (the Python backend refuses it, naming the tensor).
    base = torch.ones(10, 2)
    try:
        dist.ProcessGroup.allreduce(STRAIT, [base[:, 0]], opts()).wait()
        failures.append("C++ caller allreduce of a strided view: no error")
    except (RuntimeError, ValueError) as e:
        checks += 1
        if "contiguous" not in str(e):
            failures.append(f"C++ caller allreduce of a strided view: {e}")
    dist.barrier(group=GLOO)


def barrier():
    global checks
    dist.barrier()
    w = dist.barrier(async_op=True)
    w.wait()
    checks += 1


seed = 1
for dtype in DTYPES:
    for n in SIZES:
        case(seed, n, dtype)
        seed += 1
random_floats()
op_forms()
low_precision()
overlapping()
cpp_callers()
barrier()

dist.barrier(group=GLOO)
print(f"rank {RANK} of {P}: {checks} checks, {len(failures)} failed", flush=True)
for f in failures[:40]:
    print(f"rank {RANK}: FAIL {f}", flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
