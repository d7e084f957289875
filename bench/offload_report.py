#!/usr/bin/env python3
"""Report of bench/compare_offload_io.sh: strait's I/O engines vs fio, median over repetitions.

    bench/offload_report.py OUT_DIR

Reads OUT_DIR/strait-r*-OP-BS-QD.json (strait-bench offload --json), fio-r*-... and
fio-fixed-r*-... (fio --output-format=json) and strait-posix.json, and prints a Markdown table:
GB/s (1e9 bytes/s) per operation, block size and queue depth, with strait / fio for plain io_uring
(vs fio's defaults) and for registered buffers and files (vs fio --fixedbufs=1 --registerfiles=1).
The last lines say whether io_uring at 1 MiB, depth 32 reaches 0.9x fio for reads and writes.
"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    return int(m.group(1)) * UNITS.get(m.group(2), 1)


def human(n):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def main():
    out = sys.argv[1]
    values = defaultdict(list)  # (source, op, block, qd) -> [GB/s]
    pattern = re.compile(r"(strait|fio|fio-fixed)-r\d+-(read|write)-(\w+)-(\d+)\.json$")
    for path in sorted(glob.glob(os.path.join(out, "*-r*-*.json"))):
        m = pattern.search(os.path.basename(path))
        if not m:
            continue
        source, op, bs, qd = m.group(1), m.group(2), parse_size(m.group(3)), int(m.group(4))
        with open(path) as f:
            data = json.load(f)
        if source == "strait":
            for row in data["rows"]:
                values[(row["engine"], op, bs, qd)].append(row["gbs"])
        else:
            job = data["jobs"][0][op]
            values[(source, op, bs, qd)].append(job["bw_bytes"] / 1e9)
    posix_path = os.path.join(out, "strait-posix.json")
    adamw = None
    if os.path.exists(posix_path):
        with open(posix_path) as f:
            data = json.load(f)
        for row in data["rows"]:
            values[("posix", row["op"], row["block"], row["qd"])].append(row["gbs"])
        adamw = data.get("adamw")

    def med(key):
        v = values.get(key)
        return statistics.median(v) if v else None

    def fmt(x):
        return "n/a" if x is None else f"{x:.3f}"

    def ratio(a, b):
        return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}x"

    points = sorted({(k[1], k[2], k[3]) for k in values if k[0] == "fio"},
                    key=lambda p: (p[0] != "read", p[1], p[2]))
    reps = max((len(v) for v in values.values()), default=0)
    print(f"\nGB/s (1e9 bytes/s), median of {reps} repetitions; ratio = strait / fio.\n")
    print("| op | block | qd | fio | strait uring | ratio | fio fixed | strait uring-fixed "
          "| ratio | strait posix |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for op, bs, qd in points:
        fio = med(("fio", op, bs, qd))
        uring = med(("uring", op, bs, qd))
        fio_fixed = med(("fio-fixed", op, bs, qd))
        fixed = med(("uring-fixed", op, bs, qd))
        posix = med(("posix", op, bs, qd))
        print(f"| {op} | {human(bs)} | {qd} | {fmt(fio)} | {fmt(uring)} | {ratio(uring, fio)} "
              f"| {fmt(fio_fixed)} | {fmt(fixed)} | {ratio(fixed, fio_fixed)} | {fmt(posix)} |")
    print()
    ok = True
    for op in ("read", "write"):
        key = (op, 1 << 20, 32)
        fio, uring = med(("fio",) + key), med(("uring",) + key)
        if fio is None or uring is None:
            print(f"bar ({op}, 1M, qd 32): not measured")
            ok = False
            continue
        r = uring / fio
        runs = ", ".join(f"{a:.3f}/{b:.3f}" for a, b in
                         zip(values[("uring",) + key], values[("fio",) + key]))
        print(f"bar ({op}, 1M, qd 32): strait {uring:.3f} GB/s vs fio {fio:.3f} GB/s = {r:.2f}x "
              f"(>= 0.9x: {'met' if r >= 0.9 else 'NOT met'}; each run strait/fio: {runs})")
        ok = ok and r >= 0.9
    if adamw:
        print(f"\nCPU AdamW (kernels::adamw_step, one thread, {adamw['params']} params): "
              f"{adamw['seconds_per_step'] * 1e3:.2f} ms per step, "
              f"{adamw['params_per_s'] / 1e6:.1f} Mparams/s, {adamw['gbs']:.2f} GB/s of fp32 "
              "traffic")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
