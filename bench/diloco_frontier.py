#!/usr/bin/env python3
"""Held-out loss against bytes sent between replicas, over seeds (bench/diloco.sh SWEEP=frontier).

Reads every NAME-seedS.jsonl (`strait train --metrics`) in a folder; NAME "data-parallel" is the
baseline of each seed. Bytes between replicas: DiLoCo's steps' "outer_bytes" (summed over ranks);
data parallelism's all-reduce bytes less the tied-embedding sum inside each replica (the median
all-reduce bytes of a DiLoCo step without outer traffic, as diloco_report.py does). Prints one
table row per run and seed, then per method the mean and the spread (min .. max) over seeds of
the byte ratio and of the loss against data parallelism of the same seed; writes a PNG of the
held-out evaluations (mean over seeds, bars: min .. max) against cumulative bytes.

  diloco_frontier.py --out loss_bytes_frontier.png RESULTS_DIR
"""
import argparse
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diloco_report import load  # noqa: E402


BLOCKING = "diloco-int8-h50"  # blocking DiLoCo, the overlapped runs' reference


def evals(path):
    import json
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if '"type":"eval"' in line:
                r = json.loads(line)
                out.append((r["step"], r["eval_loss"]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("dir")
    args = parser.parse_args()
    runs = {}  # name -> seed -> (steps, summary, path)
    for path in sorted(glob.glob(os.path.join(args.dir, "*-seed*.jsonl"))):
        m = re.match(r"(.*)-seed(\d+)\.jsonl$", os.path.basename(path))
        try:
            steps, summary = load(path)
        except SystemExit:
            print(f"(skipped {os.path.basename(path)}: unfinished)")
            continue
        runs.setdefault(m.group(1), {})[int(m.group(2))] = (steps, summary, path)
    if "data-parallel" not in runs:
        sys.exit("diloco_frontier: no data-parallel-seedN.jsonl")
    inner = [s["allreduce_bytes"] for name, by in runs.items() if name != "data-parallel"
             for st, _, _ in by.values() for s in st if s.get("outer_bytes", 0) == 0]
    tied = statistics.median(inner) if inner else 0

    def between(name, steps):
        return [s.get("outer_bytes", 0) if name != "data-parallel" else s["allreduce_bytes"] - tied
                for s in steps]

    print("| run | seed | bytes between replicas | 1/x of data parallel | held-out loss | "
          "vs data parallel |")
    print("|---|---:|---:|---:|---:|---:|")
    table = {}
    for name, by in runs.items():
        for seed, (steps, summary, _) in sorted(by.items()):
            total = sum(between(name, steps))
            base = runs["data-parallel"].get(seed)
            if base is None:
                continue
            base_total = sum(between("data-parallel", base[0]))
            ratio = base_total / total if total else float("inf")
            rel = (summary["eval_loss"] / base[1]["eval_loss"] - 1) * 100
            table.setdefault(name, []).append((seed, total, ratio, summary["eval_loss"], rel))
            print(f"| {name} | {seed} | {total:,.0f} | {ratio:,.1f} | {summary['eval_loss']:.4f} | "
                  f"{rel:+.2f}% |")
    # Overlapped runs are also compared with blocking DiLoCo of the same seed (issue 25's bar).
    blocking = {seed: loss for seed, _, _, loss, _ in table.get(BLOCKING, [])}
    print("\n| run | seeds | bytes ratio, mean (min .. max) | loss vs DP, mean (min .. max) | "
          f"loss vs {BLOCKING}, mean (min .. max) |")
    print("|---|---:|---:|---:|---:|")
    for name, rows in table.items():
        ratios = [r[2] for r in rows]
        rels = [r[4] for r in rows]
        vs = [(r[3] / blocking[r[0]] - 1) * 100 for r in rows if r[0] in blocking]
        overlapped = "overlap" in name or "eager" in name
        vs_text = (f"{statistics.mean(vs):+.2f}% ({min(vs):+.2f} .. {max(vs):+.2f})"
                   if vs and overlapped else "")
        print(f"| {name} | {','.join(str(r[0]) for r in rows)} | {statistics.mean(ratios):,.0f} "
              f"({min(ratios):,.0f} .. {max(ratios):,.0f}) | {statistics.mean(rels):+.2f}% "
              f"({min(rels):+.2f} .. {max(rels):+.2f}) | {vs_text} |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 6))
    for name, by in runs.items():
        curves = []
        for seed, (steps, _, path) in sorted(by.items()):
            cum, total = {}, 0
            for s, b in zip(steps, between(name, steps)):
                total += b
                cum[s["step"]] = total
            curves.append([(cum.get(step, total), loss) for step, loss in evals(path)])
        n = min(len(c) for c in curves)
        xs = [statistics.mean(c[i][0] for c in curves) for i in range(n)]
        ys = [statistics.mean(c[i][1] for c in curves) for i in range(n)]
        lo = [ys[i] - min(c[i][1] for c in curves) for i in range(n)]
        hi = [max(c[i][1] for c in curves) - ys[i] for i in range(n)]
        ax.errorbar([max(x, 1e3) for x in xs], ys, yerr=[lo, hi], marker="o", capsize=3,
                    label=f"{name} ({len(curves)} seeds)")
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent between replicas, cumulative (all ranks)")
    ax.set_ylabel("held-out loss (nats/byte); bars: min .. max over seeds")
    ax.set_title("strait train, 2 stages x 2 replicas: loss against bytes between replicas")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
