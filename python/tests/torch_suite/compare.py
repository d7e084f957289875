"""Runs torch's distributed suite with Gloo and with strait on one selection (Gloo's, see
suite.py) on this machine, and prints each backend's pass/skip/fail counts and the tests Gloo
passes that strait does not.

  /usr/bin/python3 compare.py --world-size 2 [-k PATTERN ...] [--strait-on-gloo-passes]
      [--write-gloo-passes FILE] [--write-exceptions FILE] [--out DIR [--reuse]]

--strait-on-gloo-passes runs strait only on the tests Gloo passed (the bar; faster).
--write-gloo-passes writes Gloo's passes (the list ctest's torch.suite tests check strait
against); --write-exceptions writes every test strait does not pass, with its reason and
whether Gloo passes it. Exits 1 when strait misses a test Gloo passes. Needs PYTHONPATH and
STRAIT_LIBRARY as run_suite.py does.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(backend, args, out, extra):
    if args.reuse and os.path.exists(out):
        print(f"reusing {out}", flush=True)
        with open(out) as f:
            return json.load(f)
    cmd = [sys.executable, os.path.join(HERE, "run_suite.py"), "--backend", backend,
           "--select", "gloo", "--world-size", str(args.world_size), "--json", out]
    for k in args.k:
        cmd += ["-k", k]
    cmd += extra
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc == 77:
        sys.exit(77)
    with open(out) as f:
        return json.load(f)


def counts(rows):
    return {s: sum(1 for r in rows.values() if r["state"] == s) for s in ("PASS", "SKIP", "FAIL")}


def reason(row):
    lines = [x for x in row["detail"].strip().splitlines() if x.strip()]
    return lines[-1].strip()[:160] if lines else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("--strait-on-gloo-passes", action="store_true")
    ap.add_argument("--write-gloo-passes")
    ap.add_argument("--write-exceptions")
    ap.add_argument("--out", default=None, help="where the runs' JSON go (default: a new temp dir)")
    ap.add_argument("--reuse", action="store_true",
                    help="take gloo<N>.json / strait<N>.json already in --out instead of running")
    args = ap.parse_args()
    args.out = args.out or tempfile.mkdtemp(prefix="strait-suite-compare-")
    os.makedirs(args.out, exist_ok=True)
    ws = args.world_size
    gloo = run("gloo", args, os.path.join(args.out, f"gloo{ws}.json"), [])
    passes = sorted(t for t, r in gloo.items() if r["state"] == "PASS")
    extra = []
    if args.strait_on_gloo_passes:
        only = os.path.join(args.out, f"gloo_passes_n{ws}.txt")
        with open(only, "w") as f:
            f.write("\n".join(passes) + "\n")
        extra = ["--only", only]
    strait = run("strait", args, os.path.join(args.out, f"strait{ws}.json"), extra)
    g, s = counts(gloo), counts(strait)
    print(f"WORLD_SIZE {ws}, Gloo's selection, {len(gloo)} tests")
    print(f"  gloo:   pass {g['PASS']} skip {g['SKIP']} fail {g['FAIL']}")
    print(f"  strait: pass {s['PASS']} skip {s['SKIP']} fail {s['FAIL']} ({len(strait)} run)")
    missed = [t for t in passes if strait.get(t, {}).get("state") != "PASS"]
    print(f"  tests Gloo passes that strait does not: {len(missed)}")
    for t in missed:
        print(f"    {t}: {strait.get(t, {}).get('state', 'not run')} "
              f"{reason(strait[t]) if t in strait else ''}")
    if args.write_gloo_passes:
        with open(args.write_gloo_passes, "w") as f:
            f.write(f"# The tests of torch's DistributedTest that Gloo passes at WORLD_SIZE {ws} on "
                    "this machine\n# (compare.py --write-gloo-passes); strait must pass each.\n")
            f.write("\n".join(passes) + "\n")
    if args.write_exceptions:
        with open(args.write_exceptions, "w") as f:
            for t in sorted(gloo):
                st = strait.get(t)
                if st is not None and st["state"] == "PASS":
                    continue
                row = st if st is not None else gloo[t]
                who = "strait" if st is not None else "gloo (strait not run)"
                f.write(f"{t}\t{row['state']}\t{who}: {reason(row)}\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
