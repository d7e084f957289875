#!/usr/bin/python3
"""Allreduce bus bandwidth against message size: strait, Gloo and Open MPI, one line each.

Reads the JSON files bench/compare_allreduce.sh writes into its output folder
(PEER-RANKS-RANGE.json, PEER in strait, gloo, mpi, memcpy; the size ranges of one peer are merged) and
draws one panel per rank count into a PNG: busbw (GB/s, nccl-tests' definition) against the
vector's size in bytes, both axes log-scaled. strait's points are strait-bench's out-of-place
column, as in compare_report.py.

  plot_busbw.py --out busbw.png [--title TEXT] DIR [DIR ...]

With several folders, a later folder's peer and rank count replace an earlier one's (say, the
4-rank half of a second run). Exit status 2 when no folder holds a comparison or a file cannot be
read.
"""
import argparse
import glob
import json
import os
import re
import sys

PEERS = (("strait", "strait"), ("gloo", "Gloo (torch.distributed)"), ("mpi", "Open MPI"),
         ("memcpy", "one core's memcpy (GB/s)"))
NAME = re.compile(r"^(strait|gloo|mpi|memcpy)-(\d+)-(small|large|huge)\.json$")


def load(directory):
    """{ranks: {peer: {bytes: busbw_gbs}}}"""
    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        m = NAME.match(os.path.basename(path))
        if not m:
            continue
        peer, ranks = m.group(1), int(m.group(2))
        try:
            with open(path, encoding="utf-8") as f:
                rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as e:
            print(f"plot_busbw: cannot read {path}: {e}", file=sys.stderr)
            sys.exit(2)
        points = found.setdefault(ranks, {}).setdefault(peer, {})
        for r in rows:
            m_ = r["out_of_place"] if peer == "strait" else r
            points[r["bytes"]] = m_["gbs"] if peer == "memcpy" else m_["busbw_gbs"]
    return found


def human(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift:
            return f"{b >> shift}{unit}"
    return f"{b}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directories", nargs="+", metavar="DIR",
                    help="a folder bench/compare_allreduce.sh wrote")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="allreduce (f32 sum), one host")
    args = ap.parse_args()
    data = {}
    for directory in args.directories:
        for ranks, peers in load(directory).items():
            data.setdefault(ranks, {}).update(peers)
    if not data:
        print(f"plot_busbw: no PEER-RANKS-RANGE.json files in {' '.join(args.directories)}: pass "
              "the folder bench/compare_allreduce.sh wrote", file=sys.stderr)
        sys.exit(2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_busbw: matplotlib is missing: apt-get install python3-matplotlib")

    counts = sorted(data)
    fig, axes = plt.subplots(1, len(counts), figsize=(6.4 * len(counts), 4.4), squeeze=False)
    for ax, ranks in zip(axes[0], counts):
        sizes = set()
        for key, label in PEERS:
            points = data[ranks].get(key)
            if not points:
                continue
            xs = sorted(points)
            sizes.update(xs)
            # A zero busbw (a size too small to time) cannot be drawn on a log axis.
            ax.plot(xs, [points[x] if points[x] > 0 else float("nan") for x in xs], marker="o",
                    markersize=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = [s for s in sorted(sizes) if (s.bit_length() - 1) % 4 == 3]  # 8, 128, 2K, ...
        ax.set_xticks(ticks)
        ax.set_xticklabels([human(t) for t in ticks])
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{ranks} ranks")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend()
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot_busbw: wrote {args.out}")


if __name__ == "__main__":
    main()
