#!/usr/bin/python3
"""One core's memcpy, the bound the issue sets strait's local busbw against (bench/compare_allreduce.sh).

  memcpy_bound.py -b MIN -e MAX [-f FACTOR] [-n ITERS] [-w WARMUP] --json OUT

For each size (MIN, MIN*FACTOR, ... MAX; K, M, G suffixes) copies a source buffer into a
destination of the same size, both touched beforehand so no page fault is timed, with numpy's
copyto (a memcpy of the contiguous bytes, on this one thread): WARMUP untimed copies, then ITERS
timed ones; reports bytes / mean time in GB/s (10^9 bytes/s), as busbw is reported.
"""
import argparse
import json
import time

import numpy as np


def size(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    if text and text[-1].upper() in scale:
        return int(text[:-1]) * scale[text[-1].upper()]
    return int(text)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-b", "--minbytes", type=size, required=True)
    p.add_argument("-e", "--maxbytes", type=size, required=True)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=10)
    p.add_argument("-w", "--warmup", type=int, default=2)
    p.add_argument("--json", required=True)
    a = p.parse_args()
    if a.minbytes < 1 or a.maxbytes < a.minbytes or a.stepfactor < 2 or a.iters < 1:
        p.error("need 1 <= MIN <= MAX, FACTOR >= 2 and ITERS >= 1")
    rows = []
    b = a.minbytes
    while b <= a.maxbytes:
        src = np.full(b, 1, dtype=np.uint8)
        dst = np.zeros(b, dtype=np.uint8)
        for _ in range(a.warmup):
            np.copyto(dst, src)
        start = time.perf_counter()
        for _ in range(a.iters):
            np.copyto(dst, src)
        mean = (time.perf_counter() - start) / a.iters
        rows.append({"bytes": b, "time_us": mean * 1e6, "gbs": b / mean / 1e9})
        print(f"memcpy {b} B: {mean * 1e6:.1f} us, {b / mean / 1e9:.2f} GB/s", flush=True)
        b *= a.stepfactor
    with open(a.json, "w") as f:
        json.dump({"peer": "memcpy (one core, numpy.copyto)", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
