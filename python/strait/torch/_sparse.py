"""Sparse (COO) all_reduce of ProcessGroupStrait, as Gloo does it: every rank's indices and
values are gathered (allgather of the counts, then allgatherv of indices and of values), summed
by concatenating them and coalescing, and the result is written into the input tensor. SUM only
(Gloo's restriction too); host tensors; every rank's tensor has the same size and dtype.
Blocking: the Work returned has finished (its error is raised here)."""

import torch

from .. import _capi as C
from . import _compat


def _call(pg, rc, name):
    if rc != C.SUCCESS:
        pg._fail_submit(rc, name)


def _allgatherv(pg, t, counts, name):
    """Every rank's rows of a contiguous tensor t (counts: rows per rank), concatenated."""
    row = 1
    for d in t.shape[1:]:
        row *= d
    out = torch.empty((sum(counts),) + tuple(t.shape[1:]), dtype=t.dtype)
    dt, k = pg._mdtype(t)
    per = pg._counts([c * row * k for c in counts])
    _call(pg, C.straitAllGatherV(t.data_ptr(), out.data_ptr(), per, dt, pg._comm), name)
    return out


def allreduce(pg, tensors, opts=None):
    name = "allreduce (sparse)"
    t = pg._one(tensors, name)
    if t.layout != torch.sparse_coo:
        raise ValueError(f"strait: allreduce: {t.layout} tensors are not supported; pass a "
                         "dense or a sparse COO tensor")
    if not t.is_cpu:
        raise ValueError(f"strait: {name}: host (cpu) tensors only, got one on {t.device}")
    if opts is not None and _compat.red_op_type(opts.reduceOp) != dist_sum():
        raise ValueError(f"strait: {name}: only SUM is defined for sparse tensors (as in Gloo), "
                         f"not {opts.reduceOp.op}")
    src = t.coalesce()
    indices = src._indices().t().contiguous()  # [nnz, sparse_dim]
    values = src._values().contiguous()  # [nnz, dense dims...]
    nnz = torch.tensor([indices.shape[0]], dtype=torch.int64)
    counts = torch.empty(pg._size, dtype=torch.int64)
    _call(pg, C.straitAllGather(nnz.data_ptr(), counts.data_ptr(), 1, C.INT64, pg._comm, None),
          name)
    counts = counts.tolist()
    all_indices = _allgatherv(pg, indices, counts, name)
    all_values = _allgatherv(pg, values, counts, name)
    summed = torch.sparse_coo_tensor(all_indices.t(), all_values, t.size()).coalesce()
    t.copy_(summed)
    return _compat.work_from_completed_future(tensors)


def dist_sum():
    return torch.distributed.ReduceOp.RedOpType.SUM
