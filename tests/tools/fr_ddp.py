"""A torch DDP job on the strait backend that trains until it is stopped, for the flight-recorder
test (tests/tools/diagnose_test.cpp): the test SIGSTOPs one rank, the others' allreduces time out
(their group's 3 s deadline) and dump, and `strait diagnose` must name the stopped rank. Prints
"step N" after each step. Run as `strait run -n 3 -- /usr/bin/python3 tests/tools/fr_ddp.py`.
"""

import datetime
import sys

try:
    import torch
except ImportError as e:
    print(f"SKIP: {sys.executable} has no torch ({e})", flush=True)
    sys.exit(77)
import torch.distributed as dist
import torch.nn as nn

import strait.torch  # noqa: F401 (registers the backend)

# A loaded machine may take longer than 3 s to start every rank: the default group waits 60 s,
# and DDP runs on a second strait group whose operations fail after 3 s.
dist.init_process_group("strait", timeout=datetime.timedelta(seconds=60))
group = dist.new_group(backend="strait", timeout=datetime.timedelta(seconds=3))
rank = dist.get_rank()
torch.manual_seed(7)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
ddp = nn.parallel.DistributedDataParallel(model, process_group=group,
                                          bucket_cap_mb=0.001)  # several buckets
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
g = torch.Generator().manual_seed(99 + rank)
for step in range(1_000_000):
    opt.zero_grad()
    ddp(torch.randn(8, 16, generator=g)).square().mean().backward()
    opt.step()
    print(f"step {step}", flush=True)
