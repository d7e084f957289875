"""Runs python/tests/kill_rank.py as 2 ranks under `strait run` and judges the survivor: rank 0
must have raised RuntimeError within the group's timeout, with strait's message naming rank 1.

usage: kill_driver.py STRAIT_LAUNCHER [ddp]   (PYTHONPATH and STRAIT_LIBRARY as for the other
tests; ddp: rank 1 dies mid-backward of a DDP step, see kill_rank.py)
Exits 0 when the survivor's checks pass, 1 otherwise (printing why).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import torch  # noqa: F401 (the ranks need it)
except ImportError as _e:  # skipped (ctest SKIP_RETURN_CODE 77) only when torch is missing
    print(f"SKIP: {sys.executable} has no torch ({_e}); scripts/setup.sh --tests installs python3-torch",
          flush=True)
    sys.exit(77)

launcher = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
with tempfile.TemporaryDirectory(prefix="strait-kill-") as tmp:
    marker = os.path.join(tmp, "rank0.json")
    start = time.monotonic()
    # --kill-grace: the launcher must leave rank 0 running after rank 1 dies, so that rank 0's
    # own error handling is what the test sees.
    mode = sys.argv[2:3]  # [] or ["ddp"]
    proc = subprocess.run([launcher, "run", "--kill-grace", "60", "-n", "2", "--",
                           sys.executable, os.path.join(here, "kill_rank.py"), marker, *mode],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    elapsed = time.monotonic() - start
    print(proc.stdout[-4000:])
    problems = []
    if proc.returncode == 0:
        problems.append("the launcher reported success, yet rank 1 was killed")
    if not os.path.exists(marker):
        problems.append("rank 0 wrote no result: it died or hung")
    else:
        with open(marker) as f:
            r = json.load(f)
        if not r["raised"]:
            problems.append("rank 0's all_reduce returned normally although rank 1 was dead")
        else:
            if r["elapsed_s"] > r["timeout_s"] + 5:
                problems.append(f"rank 0 raised after {r['elapsed_s']:.1f} s, beyond the "
                                f"{r['timeout_s']} s timeout")
            if "rank 1" not in r["message"]:
                problems.append(f"rank 0's error does not name rank 1: {r['message']!r}")
            if "strait" not in r["message"]:
                problems.append(f"rank 0's error is not strait's: {r['message']!r}")
        print(f"kill_driver: rank 0 raised={r['raised']} after {r['elapsed_s']:.2f} s: "
              f"{(r['message'] or '')[:300]}")
    print(f"kill_driver: job took {elapsed:.1f} s; launcher exit status {proc.returncode}")
    for p in problems:
        print(f"kill_driver: FAIL {p}")
    sys.exit(1 if problems else 0)
