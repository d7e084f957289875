"""Byte sizes as the benchmarks take them on the command line: 8, 64K, 256M, 1G (binary units,
an optional trailing B), the form strait-bench's -b/-e use."""
import argparse


def parse_size(text):
    units = {"K": 10, "M": 20, "G": 30}
    t = text.upper().rstrip("B")
    shift = units.get(t[-1:], 0)
    if shift:
        t = t[:-1]
    if not t.isdigit():
        raise argparse.ArgumentTypeError(f"size '{text}' is not a size (e.g. 8, 64K, 256M)")
    return int(t) << shift
