#!/usr/bin/env python3
"""Tokens/s and held-out loss of bench/quorum.sh's runs, per seed: quorum2-seedS against
wait-all-seedS. Plain DiLoCo's tokens/s is its summary's (steps x replicas x tokens per step over
rank 0's training time, steps only); the quorum run's is its last quorum_round record's
total_tokens over rank 0's training time alike ("totals.train_seconds").

  quorum_report.py RESULTS_DIR
"""
import glob
import json
import os
import re
import statistics
import sys


def records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = []
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "wait-all-seed*.jsonl"))):
        seed = re.search(r"seed(\d+)", path).group(1)
        other = path.replace("wait-all", "quorum2")
        if not os.path.exists(other):
            continue
        base = [r for r in records(path) if r.get("type") == "summary"]
        quorum = records(other)
        qs = [r for r in quorum if r.get("type") == "summary"]
        rounds = [r for r in quorum if r.get("type") == "quorum_round"]
        if not base or not qs or not rounds:
            print(f"(seed {seed}: unfinished)")
            continue
        base_tps = base[0]["tokens_per_s"]
        q_tps = rounds[-1]["total_tokens"] / qs[0]["totals.train_seconds"]
        slow = sum(2 in r["included"] for r in rounds)
        rows.append((seed, base_tps, q_tps, base[0]["eval_loss"], qs[0]["eval_loss"], len(rounds),
                     slow))
    print("| seed | tokens/s, wait for all | tokens/s, quorum 2 of 3 | ratio | held-out loss, "
          "wait for all | quorum | vs wait for all | rounds (with the slowed replica) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seed, b, q, lb, lq, n, slow in rows:
        print(f"| {seed} | {b:,.0f} | {q:,.0f} | {q / b:.2f}x | {lb:.4f} | {lq:.4f} | "
              f"{(lq / lb - 1) * 100:+.2f}% | {n} ({slow}) |")
    if rows:
        ratios = [q / b for _, b, q, *_ in rows]
        rels = [(lq / lb - 1) * 100 for _, _, _, lb, lq, *_ in rows]
        print(f"\nratio mean {statistics.mean(ratios):.2f}x ({min(ratios):.2f} .. {max(ratios):.2f}),"
              f" loss {statistics.mean(rels):+.2f}% ({min(rels):+.2f} .. {max(rels):+.2f})")


if __name__ == "__main__":
    main()
