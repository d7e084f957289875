"""strait as a torch.distributed backend.

    import strait.torch                     # registers backend "strait"
    import torch.distributed as dist
    dist.init_process_group("strait")       # under torchrun or `strait run -n N`
    dist.all_reduce(tensor)                 # host tensors on UCX, CUDA tensors on NCCL

Also ``dist.new_group(ranks, backend="strait")``. The group bootstraps over the store torch
creates (no second port) and takes ``init_process_group``'s ``timeout`` as the deadline of every
operation. See ``strait.torch.backend`` for what each collective accepts and raises.
"""

from ._compat import register_backend
from .backend import ProcessGroupStrait, StraitWork, create_process_group

__all__ = ["ProcessGroupStrait", "StraitWork", "create_process_group", "BACKEND"]

BACKEND = "strait"

register_backend(BACKEND, create_process_group)
