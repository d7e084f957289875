"""strait as a torch.distributed backend.

    import strait.torch                     # registers backend "strait"
    import torch.distributed as dist
    dist.init_process_group("strait")       # under torchrun or `strait run -n N`
    dist.all_reduce(tensor)                 # host tensors on UCX, CUDA tensors on NCCL

Also ``dist.new_group(ranks, backend="strait")``. Importing it also lets
``dist.monitored_barrier`` reach strait groups (torch's function accepts Gloo's alone), and
records the factors of ``dist._make_nccl_premul_sum`` ops (PREMUL_SUM, see ``_premul``). The
group bootstraps over the store torch
creates (no second port) and takes ``init_process_group``'s ``timeout`` as the deadline of every
operation. See ``strait.torch.backend`` for what each collective accepts and raises.

``strait.torch.empty(*size, dtype=torch.float32, group=None)`` gives a CPU tensor in the group's
symmetric memory, which its collectives read in place from every local peer (``_memory``).
"""

from . import _premul
from ._compat import allow_monitored_barrier, register_backend
from ._memory import empty
from .backend import ProcessGroupStrait, StraitWork, create_process_group

__all__ = ["ProcessGroupStrait", "StraitWork", "create_process_group", "BACKEND", "empty"]

BACKEND = "strait"

register_backend(BACKEND, create_process_group)
allow_monitored_barrier(BACKEND)  # torch's dist.monitored_barrier names Gloo alone
_premul.install()
