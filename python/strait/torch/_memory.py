"""Symmetric memory for torch: ``strait.torch.empty``, a CPU tensor whose storage every local peer
of a strait group maps once (``straitMemAlloc``, capi/strait.h), so that the group's collectives
on it read and reduce the peers' data in place, with no system call or staging copy per call.

The storage is a ctypes array over the buffer (``torch.frombuffer``, in torch 1.13 and 2.x),
which the storage keeps alive; when the last tensor or view over it goes, the array's finalizer
frees the buffer (``straitMemFree``). The finalizer holds the group, so a group lives as long as
its buffers unless it is shut down explicitly (``ProcessGroupStrait.shutdown``, or at exit): the
communicator's destruction frees what is left, and the finalizers then free nothing (tensors
still referencing such a buffer must not be touched again).
"""

import ctypes
import math
import weakref

import torch
import torch.distributed as dist

from .. import _capi as C

__all__ = ["empty"]


def _group(group):
    from .backend import ProcessGroupStrait  # backend imports this module's package

    if group is None:
        if not dist.is_initialized():
            raise ValueError("strait.torch.empty: no default process group; call "
                             "torch.distributed.init_process_group(\"strait\") first, or pass "
                             "group= a strait group")
        group = dist.distributed_c10d._get_default_group()
    if not isinstance(group, ProcessGroupStrait):
        try:
            backend = dist.get_backend(group)
        except Exception:  # not a registered group at all
            backend = type(group).__name__
        raise ValueError(f"strait.torch.empty: the group is a {backend!s} group, not strait's; "
                         "symmetric memory needs a group made with "
                         "torch.distributed.init_process_group(\"strait\") or "
                         "new_group(backend=\"strait\")")
    return group


def _free(group, ptr):
    # Skipped once the communicator is gone: straitCommDestroy freed the buffer already.
    if group._finalizer.alive:
        C.straitMemFree(group._comm, ptr)  # a failure here has no caller to report to


def empty(*size, dtype=torch.float32, group=None):
    """A CPU tensor of ``size`` (ints, or one tuple / torch.Size) and ``dtype``, uninitialised
    in torch's terms (zero-filled in fact), whose storage is a symmetric buffer of ``group``'s
    communicator (the default group when None).

    Collective: every rank of the group calls it with the same size and dtype, in the same order
    as its other ``empty`` calls on the group. Pays off for large tensors that a group of ranks
    on one host reduces often (gradient buckets reduced every step): allgather, reduce-scatter
    and alltoall read such buffers in place from 64 KiB a block, as do the other algorithms' large
    messages between local ranks (the 2-rank ring allreduce) and, from 3 ranks, the mailbox
    allreduce (it reduces from the peers' mappings); elsewhere (ranks on several hosts) it is
    ordinary memory. Freed when the last tensor or view over it goes away.

    Raises ValueError when the group is not strait's, or for a negative size; RuntimeError
    (StraitError) with strait's message when the allocation fails (ranks asking for different
    sizes, a rank missing past the group's timeout, memfd or mmap refused).
    """
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise ValueError(f"strait.torch.empty: negative size {size}")
    pg = _group(group)
    numel = math.prod(size)
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = numel * itemsize
    if nbytes == 0:  # nothing to share; every rank asked for 0 bytes, so none allocates
        return torch.empty(size, dtype=dtype)
    ptr = ctypes.c_void_p()
    rc = C.straitMemAlloc(pg._comm, nbytes, ctypes.byref(ptr))
    C.check(rc, pg._comm, f"strait.torch.empty({size}, {dtype}) (straitMemAlloc of {nbytes} "
            "bytes)")

    class _Buffer(ctypes.c_uint8 * nbytes):  # a subclass: weakref-able, freed by its finalizer
        pass

    buffer = _Buffer.from_address(ptr.value)
    done = weakref.finalize(buffer, _free, pg, ptr.value)
    done.atexit = False  # at exit the communicator's destruction frees it
    return torch.frombuffer(buffer, dtype=dtype, count=numel).view(size)
