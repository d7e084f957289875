"""What every torch test script starts with: torch (or exit 77, ctest's skip, when this Python has
none), the default group on strait's backend with a 60 s deadline, and a gloo group over the same
ranks as the reference. Imported by the scripts beside it (their folder is on sys.path)."""

import datetime
import sys

try:
    import torch  # noqa: F401
except ImportError as _e:  # skipped (ctest SKIP_RETURN_CODE 77) only when torch is missing
    print(f"SKIP: {sys.executable} has no torch ({_e}); scripts/setup.sh --tests installs python3-torch",
          flush=True)
    sys.exit(77)
import torch.distributed as dist

import strait.torch  # noqa: F401 (registers the backend)


def start():
    """Initialises the default group on strait; returns (rank, world size, a gloo group)."""
    dist.init_process_group("strait", timeout=datetime.timedelta(seconds=60))
    return dist.get_rank(), dist.get_world_size(), dist.new_group(backend="gloo")


class Checks:
    """A script's checks: check(what, ok, detail) records a failure instead of stopping, so that
    one run reports every failed check; `failures` lists them, `count` counts all."""

    def __init__(self):
        self.failures = []
        self.count = 0

    def check(self, what, ok, detail=""):
        self.count += 1
        if not ok:
            self.failures.append(f"{what}{': ' + detail if detail else ''}")
