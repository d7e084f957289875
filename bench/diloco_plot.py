#!/usr/bin/env python3
"""Loss curves of data parallelism and DiLoCo recipes in one PNG, with the bytes each run sent
between the replicas on a second axis.

Reads the JSON-lines files `strait train --metrics` writes. Left axis: the training loss (moving
average over 50 steps) and the held-out evaluations (markers). Right axis, log scale: cumulative
bytes sent between replicas, the same colour dashed. For DiLoCo those are the steps' "outer_bytes"
(the outer average over the data-parallel groups); for the data-parallel run, its all-reduce bytes
less the tied-embedding sum inside each replica (diloco_report.py explains that split).

  diloco_plot.py --out loss_bytes.png DATA_PARALLEL.jsonl DILOCO.jsonl ...
"""
import argparse
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from diloco_report import load  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "plot"))
import plot_convergence  # noqa: E402


def label_of(summary):
    if not summary.get("outer_steps"):
        return "data parallel"
    codec = summary["outer_codec"].split(":")[0]
    return (f"DiLoCo H={summary['outer_steps']} {codec}, outer lr {summary['outer_lr']:g} "
            f"mu {summary['outer_momentum']:g}{', overlap' if summary.get('outer_overlap') else ''}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--title", default="strait train: data parallel vs DiLoCo")
    parser.add_argument("runs", nargs="+", help="--metrics files, the data-parallel run first")
    args = parser.parse_args()
    runs = [load(p) for p in args.runs]
    # The tied-embedding sum inside each replica: a DiLoCo step without outer traffic.
    inner = [s["allreduce_bytes"] for st, sm in runs if sm.get("outer_steps")
             for s in st if s.get("outer_bytes", 0) == 0]
    tied = statistics.median(inner) if inner else 0

    fig, loss_ax = plt.subplots(figsize=(11, 6))
    bytes_ax = loss_ax.twinx()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((steps, summary), path) in enumerate(zip(runs, args.runs)):
        colour = colours[i % len(colours)]
        x = [s["step"] for s in steps]
        label = label_of(summary)
        loss_ax.plot(x, plot_convergence.moving_average([s["loss"] for s in steps], 50), color=colour, lw=1.2,
                     label=f"{label}: eval {summary['eval_loss']:.4f}")
        points = plot_convergence.load(path)[2]
        if points:
            loss_ax.plot(*zip(*points), "o", color=colour, ms=5)
        sent, total = [], 0.0
        for s in steps:
            total += s.get("outer_bytes", 0) if summary.get("outer_steps") else \
                s["allreduce_bytes"] - tied
            sent.append(max(total, 1e4))
        bytes_ax.plot(x, sent, "--", color=colour, lw=1)
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("training loss (50-step mean, nats/byte); dots: held-out")
    bytes_ax.set_ylabel("bytes sent between replicas, cumulative (dashed)")
    bytes_ax.set_yscale("log")
    bytes_ax.set_ylim(bottom=1e4)
    loss_ax.legend(loc="upper right", fontsize=8)
    loss_ax.set_title(args.title)
    loss_ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
