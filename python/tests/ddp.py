"""DistributedDataParallel over the strait backend, without comm hooks: DDP's C++ side
(_verify_params_across_processes, _broadcast_coalesced of the module states, the Reducer's
gradient allreduce) calls the group itself. The same model, data and steps with gloo must give
bit-identical parameters (2 ranks: each gradient element is one addition, the same in any
order). Run as 2 ranks: `strait run -n 2 -- /usr/bin/python3 python/tests/ddp.py`.
"""

import sys

import torch_job  # torch (or skip), strait's default group, a gloo group

import torch
import torch.distributed as dist
import torch.nn as nn

RANK, _, GLOO = torch_job.start()


def train(group, steps=4):
    torch.manual_seed(1234 + RANK)  # different initial weights: DDP must broadcast rank 0's
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group,
                                              bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(99 + RANK)
    for _ in range(steps):
        opt.zero_grad()
        loss = ddp(torch.randn(8, 16, generator=g)).square().mean()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


got = train(dist.group.WORLD)
ref = train(GLOO)
bad = [i for i, (a, b) in enumerate(zip(got, ref)) if not torch.equal(a, b)]
print(f"rank {RANK}: {len(got)} parameters after DDP steps, {len(bad)} differ from gloo's",
      flush=True)
sys.exit(1 if bad else 0)
