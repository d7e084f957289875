#!/usr/bin/env python3
"""Bytes per step and final held-out loss of `strait train` runs, data parallel against DiLoCo.

Reads the JSON-lines files `strait train --metrics` writes. "allreduce_bytes" of a step is what
every rank's all-reduces sent (strait's CommStats, summed over ranks); DiLoCo's steps also carry
"outer_bytes", the part sent over the data-parallel groups (between replicas) by the outer
average. Inside a replica, the first and last stage sum the tied embedding's gradient every step in
both modes; that part is measured on DiLoCo's steps without an outer average and taken off the data
parallel run's total to give its bytes between replicas.

  diloco_report.py DATA_PARALLEL.jsonl DILOCO.jsonl ...
"""
import json
import statistics
import sys


def load(path):
    steps, summary = [], {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("type") == "step":
                    steps.append(r)
                elif r.get("type") == "summary":
                    summary = r
    if not steps or not summary:
        sys.exit(f"diloco_report: {path} has no steps or no summary: the run did not finish")
    return steps, summary


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    base_steps, base = load(sys.argv[1])
    runs = [load(p) for p in sys.argv[2:]]
    # The inner tied-embedding sum: a DiLoCo step with no outer traffic.
    inner = [s["allreduce_bytes"] for st, _ in runs for s in st if s.get("outer_bytes", 0) == 0]
    tied = statistics.median(inner) if inner else 0
    n = len(base_steps)
    base_total = sum(s["allreduce_bytes"] for s in base_steps) / n
    base_between = base_total - tied
    print()
    print("| run | bytes/step, all | bytes/step between replicas | vs data parallel | "
          "final eval loss | vs data parallel | compute utilisation | train time (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| data parallel | {base_total:,.0f} | {base_between:,.0f} | 1 | "
          f"{base['eval_loss']:.4f} | - | - | {base['train_seconds']:.1f} |")
    for steps, summary in runs:
        total = sum(s["allreduce_bytes"] for s in steps) / len(steps)
        between = sum(s.get("outer_bytes", 0) for s in steps) / len(steps)
        label = (f"DiLoCo H={summary['outer_steps']} {summary['outer_codec'].split(':')[0]} "
                 f"lr {summary['outer_lr']} mu {summary['outer_momentum']}"
                 f"{' overlap' if summary.get('outer_overlap') else ''}")
        print(f"| {label} | {total:,.0f} | {between:,.0f} | 1/{base_between / between:.1f} | "
              f"{summary['eval_loss']:.4f} | {(summary['eval_loss'] / base['eval_loss'] - 1) * 100:+.2f}% | "
              f"{summary.get('compute_utilisation', 1.0) * 100:.1f}% | {summary['train_seconds']:.1f} |")
    print(f"\n(the tied-embedding sum inside each replica, {tied:,.0f} bytes per step, is in "
          "'all' for every run)")


if __name__ == "__main__":
    main()
