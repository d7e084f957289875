"""Every difference between torch versions that the strait backend meets, in one place.

Written against torch 1.13 (Debian 12's python3-torch, where it is tested) and the torch 2.x
API as documented; the 2.x branches are untested here.

1.13 vs 2.x:
- ``Backend.register_backend(name, func, extended_api=False)``; 2.1 adds ``devices=``, and needs
  it (["cpu", "cuda"]) for the backend to be chosen for both devices. From 2.1, torch also keeps a
  creator's ProcessGroup subclass as the group itself (2.0 expected a c10d::Backend: unsupported).
- A Python subclass of ``dist.Work`` is only seen by Python callers in 1.13: C++ callers
  (``dist._broadcast_coalesced``, ``_verify_params_across_processes``, DDP's Reducer) call the
  C++ base ``Work::wait()``, which never returns for a Python subclass, and ``getFuture()``,
  which throws. Later versions have a trampoline (``PyProcessGroup::PyWork``) that dispatches
  those calls to Python. strait does not rely on it: every version's C++ callers get a C++ Work
  over a torch Future (``work_from_future``, torch's ``_create_work_from_future``), pending until
  the operation finishes (``_work.cpp_work``, STRAIT_TORCH_CPP_WORK), so DDP overlaps without a
  hook. See ``python_work_seen_by_cpp`` and backend.py's ``_called_from_cpp``.
- ``ReduceOp`` objects: ``op.op`` is the ``ReduceOp.RedOpType`` in both. PREMUL_SUM's factor
  (``_make_nccl_premul_sum``) stays in C++ in both: a Python backend cannot read it.
- ``dist.monitored_barrier`` refuses every backend but Gloo by name (1.13 and 2.x):
  ``allow_monitored_barrier`` lets a group of the named backend through to its own method.
- Methods torch 1.13 has no Python API for (``allgather_into_tensor_coalesced``,
  ``reduce_scatter_tensor_coalesced``, 2.x's) are reached by calling the group's method.
"""

import sys

import torch
import torch.distributed as dist

__all__ = ["TORCH_VERSION", "register_backend", "python_work_seen_by_cpp", "red_op_type",
           "work_from_future", "work_from_completed_future", "c10d_file",
           "allow_monitored_barrier"]


def _version(text):
    parts = []
    for p in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


TORCH_VERSION = _version(torch.__version__)

# Whether C++ callers reach a Python Work's wait/get_future. Later torch has a trampoline for it
# (PyProcessGroup::PyWork in torch/csrc/distributed/c10d/PyProcessGroup.hpp), 1.13 has not; the
# version it arrived in is not verified here, and guessing too low would make C++ callers hang,
# so every version takes the path that works everywhere: C++ callers get a C++ Work over a torch
# Future (pending: DDP still overlaps; backend.ProcessGroupStrait._submit, _work.cpp_work).
python_work_seen_by_cpp = False

# torch 1.13 has it in torch._C._distributed_c10d only; later versions also re-export it.
_create_work_from_future = getattr(dist.distributed_c10d, "_create_work_from_future", None) or \
    torch._C._distributed_c10d._create_work_from_future

# The file whose functions (all_reduce, broadcast, ...) are the Python callers of a ProcessGroup.
c10d_file = sys.modules[dist.distributed_c10d.__name__].__file__
if c10d_file.endswith((".pyc", ".pyo")):
    c10d_file = c10d_file[:-1]


def red_op_type(op):
    """The ReduceOp.RedOpType of a ReduceOp (1.13 and 2.x objects, or a bare RedOpType)."""
    return getattr(op, "op", op)


def register_backend(name, creator):
    """Registers creator(store, rank, size, timeout) -> ProcessGroup for host and CUDA tensors."""
    if name.upper() in getattr(dist.Backend, "_plugins", {}):
        return  # already registered (a second import of the module under another name)
    if TORCH_VERSION >= (2, 0):
        try:
            dist.Backend.register_backend(name, creator, devices=["cpu", "cuda"])
            return
        except TypeError:  # a 2.x without devices= (2.0): the creator is then used for both
            pass
    dist.Backend.register_backend(name, creator)


def work_from_future(fut):
    """A C++ Work (FutureWrappingWork) over the torch Future ``fut``: its wait() waits for the
    future (raising its error), its get_future() returns it. C++ callers (DDP's Reducer) get
    this; pending, it lets them go on while the operation runs."""
    return _create_work_from_future(fut)


def work_from_completed_future(value):
    """A C++ Work already completed with ``value``: wait() returns at once."""
    fut = torch.futures.Future()
    fut.set_result(value)
    return _create_work_from_future(fut)


def allow_monitored_barrier(name):
    """Makes ``dist.monitored_barrier`` call the group's own ``monitored_barrier`` for groups of
    backend ``name`` (torch's function refuses all but Gloo by name); other groups go to torch's
    function unchanged. Idempotent."""
    c10d = dist.distributed_c10d
    original = c10d.monitored_barrier
    if getattr(original, "_strait_backend", None) == name:
        return

    def monitored_barrier(group=c10d.GroupMember.WORLD, timeout=None, wait_all_ranks=False):
        if c10d._rank_not_in_group(group) or c10d.get_backend(group) != name:
            return original(group, timeout, wait_all_ranks)
        if timeout is None:
            timeout = c10d.default_pg_timeout
        group_to_use = c10d._get_default_group() if group is None else group
        return group_to_use.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier.__doc__ = original.__doc__
    monitored_barrier._strait_backend = name
    c10d.monitored_barrier = monitored_barrier
    dist.monitored_barrier = monitored_barrier
