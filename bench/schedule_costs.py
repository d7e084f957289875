#!/usr/bin/env python3
"""Per-action costs of `strait train --trace` runs, to tell what a schedule's step is made of.

    bench/schedule_costs.py TRACE...      (e.g. OUT/1f1b-r*.trace.json OUT/zb-h1-r*.trace.json)

Prints, per trace and stage, the median F, B and W durations (ms) over the steps from the third
on, whether each B was split (a W of the same stage and microbatch ran) or fused, and per rank the
median busy time (F + B + W), the step's makespan and the idle rest; then, for each pair of traces
of two schedules given, the split B + W over the fused B per stage (the cost of splitting).
"""
import collections
import json
import statistics
import sys


def load(path):
    doc = json.load(open(path))
    info = doc.get("otherData", {})
    steps = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            steps[e["args"]["step"]].append(e)
    return info, [steps[k] for k in sorted(steps)][2:]


def summarise(path):
    info, steps = load(path)
    dur = collections.defaultdict(list)  # (stage, kind) -> ms
    busy = collections.defaultdict(list)
    span = []
    for events in steps:
        w_keys = {(e["args"]["stage"], e["args"]["microbatch"]) for e in events if e["cat"] == "W"}
        per_rank = collections.Counter()
        for e in events:
            a = e["args"]
            kind = e["cat"]
            if kind == "B":
                kind = "Bsplit" if (a["stage"], a["microbatch"]) in w_keys else "Bfused"
            if kind in ("F", "Bsplit", "Bfused", "W"):
                dur[a["stage"], kind].append(e["dur"] / 1e3)
                per_rank[e["pid"]] += e["dur"] / 1e3
        t0 = min(e["ts"] for e in events)
        t1 = max(e["ts"] + e["dur"] for e in events)
        span.append((t1 - t0) / 1e3)
        for r, b in per_rank.items():
            busy[r].append(b)
    med = {k: statistics.median(v) for k, v in dur.items()}
    return info, med, {r: statistics.median(v) for r, v in busy.items()}, statistics.median(span)


def main(paths):
    by_schedule = collections.defaultdict(list)
    for p in paths:
        info, med, busy, span = summarise(p)
        by_schedule[info["schedule"]].append(med)
        stages = sorted({s for s, _ in med})
        print(f"{p}: {info['schedule']}, median step {span:.1f} ms")
        for s in stages:
            cells = " ".join(f"{k}={med[s, k]:.2f}" for k in ("F", "Bfused", "Bsplit", "W")
                             if (s, k) in med)
            print(f"  stage {s}: {cells}")
        for r in sorted(busy):
            print(f"  rank {r}: busy {busy[r]:.1f} ms, idle {span - busy[r]:.1f} ms "
                  f"({100 * (span - busy[r]) / span:.1f}%)")
    names = list(by_schedule)
    for a in names:
        for b in names:
            if a == b:
                continue
            fused = [m for m in by_schedule[a] if any(k == "Bfused" for _, k in m)]
            split = [m for m in by_schedule[b] if any(k == "Bsplit" for _, k in m)]
            if not fused or not split or any(k == "Bsplit" for m in fused for _, k in m):
                continue
            for s in sorted({s for m in split for s, k in m if k == "Bsplit"}):
                f = statistics.median(m[s, "Bfused"] for m in fused if (s, "Bfused") in m)
                bw = statistics.median(m[s, "Bsplit"] + m[s, "W"] for m in split
                                       if (s, "Bsplit") in m and (s, "W") in m)
                print(f"stage {s}: {b} B + W {bw:.2f} ms over {a}'s fused B {f:.2f} ms: "
                      f"{bw / f:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
