"""The installed package: `PYTHONPATH=PREFIX/lib/python3/dist-packages /usr/bin/python3
install_check.py PREFIX` imports strait.torch from PREFIX (STRAIT_LIBRARY unset), checks it loaded
PREFIX's libstrait.so, and runs a 1-rank group (store: a HashStore) through it."""

import datetime
import os
import sys

try:
    import torch
except ImportError as e:
    print(f"SKIP: /usr/bin/python3 has no torch ({e}); scripts/setup.sh --tests installs python3-torch")
    sys.exit(77)
import torch.distributed as dist

prefix = os.path.realpath(sys.argv[1])
assert "STRAIT_LIBRARY" not in os.environ, "unset STRAIT_LIBRARY: the package must find it"
import strait
import strait._capi
import strait.torch

problems = []
for name, mod in (("strait", strait), ("strait._capi", strait._capi)):
    if not os.path.realpath(mod.__file__).startswith(prefix + os.sep):
        problems.append(f"{name} came from {mod.__file__}, not from {prefix}")
lib = os.path.realpath(strait._capi.library_path)
if not lib.startswith(prefix + os.sep):
    problems.append(f"libstrait.so came from {lib}, not from {prefix}")
dist.init_process_group("strait", store=dist.HashStore(), rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=30))
t = torch.arange(5.0)
dist.all_reduce(t)
if not torch.equal(t, torch.arange(5.0)):
    problems.append(f"a 1-rank all_reduce changed its tensor: {t}")
print(f"install_check: strait from {os.path.dirname(strait.__file__)}, library {lib}")
for p in problems:
    print(f"install_check: FAIL {p}")
sys.exit(1 if problems else 0)
