"""PREMUL_SUM for the strait backend: the sum over ranks of factor * input (NCCL's
ncclRedOpCreatePreMulSum; torch's ``dist._make_nccl_premul_sum(factor)``, used to fold a
gradient's averaging into its reduction).

torch keeps the factor inside the C++ ReduceOp, out of a Python backend's reach, so ``install``
wraps ``dist._make_nccl_premul_sum`` to remember each op's factor (by a weak reference to the op)
and ``factor`` finds the op object the caller passed to torch's Python API (``dist.all_reduce``,
``dist.reduce_scatter_tensor``) in that function's frame. Called any other way (a group's method
directly, or C++), the factor cannot be found and the call is refused, saying so.

The backend then scales and sums: all_reduce scales its tensor in place (it is overwritten
anyway), reduce_scatter_tensor a copy of its input; the product is in the tensor's dtype, as
NCCL's is. Floating-point tensors only.
"""

import sys
import weakref

import torch
import torch.distributed as dist

from . import _compat

__all__ = ["install", "factor"]

_FACTORS = {}  # id(op) -> (weakref to op, factor)


def _remember(op, value):
    key = id(op)
    _FACTORS[key] = (weakref.ref(op, lambda _ref, k=key: _FACTORS.pop(k, None)), value)


def install():
    """Wraps dist._make_nccl_premul_sum so that strait can read the factors back. Idempotent."""
    make = getattr(dist, "_make_nccl_premul_sum", None)
    if make is None or getattr(make, "_strait", False):
        return

    def make_premul_sum(factor):
        op = make(factor)
        _remember(op, factor)
        return op

    make_premul_sum.__doc__ = make.__doc__
    make_premul_sum._strait = True
    dist._make_nccl_premul_sum = make_premul_sum


def factor(name, tensor):
    """The factor of the PREMUL_SUM op that torch's Python API was called with, for the
    operation ``name`` on ``tensor``; raises ValueError saying what to do when it is out of
    reach or the dtype is not floating point."""
    if not tensor.is_floating_point():
        raise ValueError(f"strait: {name}: PREMUL_SUM is defined for floating-point tensors "
                         f"only, not {tensor.dtype}")
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename != _compat.c10d_file:
        f = f.f_back
    op = f.f_locals.get("op") if f is not None else None
    entry = _FACTORS.get(id(op)) if op is not None else None
    if entry is None or entry[0]() is not op:
        raise ValueError(f"strait: {name}: PREMUL_SUM's factor is kept by torch in C++, where "
                         "strait reads it only for an op made by dist._make_nccl_premul_sum "
                         "after `import strait.torch` and passed to dist.all_reduce or "
                         "dist.reduce_scatter_tensor; scale the tensor and use SUM instead")
    value = entry[1]
    if isinstance(value, (list, tuple)):  # torch 1.13: one tensor per device, one device here
        value = value[0]
    return value.to(tensor.device) if isinstance(value, torch.Tensor) else value
