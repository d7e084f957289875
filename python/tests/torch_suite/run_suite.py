"""Runs torch's distributed suite (see suite.py) with one backend and one selection.

  /usr/bin/python3 run_suite.py --backend strait --select gloo --world-size 2 \
      [-k PATTERN ...] [--only FILE] [--shard I/N] [--json OUT] [--list]

Prints one line per test (PASS, SKIP with its reason, FAIL with the first line of its error)
and a summary "pass P skip S fail F". With --expect FILE (a list of test names, one a line,
'#' comments), exits 1 when one of them did not pass, else 0; without it, exits 1 on any
failure. Exits 77 when this python has no torch. PYTHONPATH must reach the strait package and
STRAIT_LIBRARY its library when the backend is strait.
"""

import argparse
import fnmatch
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def names_from(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    return out


class Result(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rows = {}
        self._t0 = 0.0

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def _row(self, test, state, detail=""):
        name = test.id().rsplit(".", 1)[-1]
        self.rows[name] = {"state": state, "detail": detail,
                           "seconds": round(time.monotonic() - self._t0, 2)}
        line = detail.strip().splitlines()[-1] if detail.strip() else ""
        print(f"{state:4} {name} ({self.rows[name]['seconds']} s){': ' + line[:200] if line else ''}",
              flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._row(test, "PASS")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._row(test, "SKIP", reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._row(test, "FAIL", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._row(test, "FAIL", self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._row(test, "SKIP", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._row(test, "PASS")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("strait", "gloo"), default="strait")
    ap.add_argument("--select", choices=("strait", "gloo"), default="gloo",
                    help="the backend name the suite's skip decorators see (default gloo)")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("-k", action="append", default=[],
                    help="run tests whose name contains (or fnmatch-es) this; repeatable")
    ap.add_argument("--only", help="a file of test names: run only these")
    ap.add_argument("--expect", help="a file of test names that must pass")
    ap.add_argument("--shard", default="0/1", help="I/N: the I-th of N interleaved parts")
    ap.add_argument("--json", help="write {test: {state, detail, seconds}} here")
    ap.add_argument("--list", action="store_true", help="print the selected names and exit")
    args = ap.parse_args()

    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: this python has no torch (Debian: apt install python3-torch)")
        return 77

    tmp = tempfile.mkdtemp(prefix="strait-torch-suite-")
    os.environ.update(TORCH_SUITE_SELECT=args.select, TORCH_SUITE_BACKEND=args.backend,
                      WORLD_SIZE=str(args.world_size), TEMP_DIR=tmp)
    sys.path.insert(0, HERE)
    sys.argv = sys.argv[:1]  # common_utils parses sys.argv at import
    import suite

    loader = unittest.TestLoader()
    names = sorted(loader.getTestCaseNames(suite.TestDistBackendWithSpawn))
    if args.k:
        names = [n for n in names
                 if any(p in n or fnmatch.fnmatchcase(n, p) for p in args.k)]
    if args.only:
        wanted = set(names_from(args.only))
        names = [n for n in names if n in wanted]
    i, n = (int(x) for x in args.shard.split("/"))
    names = names[i::n]
    if args.list:
        print("\n".join(names))
        return 0
    tests = unittest.TestSuite(suite.TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(resultclass=Result, verbosity=0, stream=open(os.devnull, "w"))
    t0 = time.monotonic()
    try:
        result = runner.run(tests)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = result.rows
    counts = {s: sum(1 for r in rows.values() if r["state"] == s) for s in ("PASS", "SKIP", "FAIL")}
    print(f"backend {args.backend} select {args.select} world_size {args.world_size}: "
          f"pass {counts['PASS']} skip {counts['SKIP']} fail {counts['FAIL']} "
          f"({len(rows)} tests, {time.monotonic() - t0:.0f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, sort_keys=True)
    if args.expect:
        missing = [x for x in names_from(args.expect) if x in rows and rows[x]["state"] != "PASS"]
        if missing:
            print(f"{len(missing)} test(s) that Gloo passes did not pass on {args.backend}: "
                  + ", ".join(missing))
            return 1
        return 0
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
