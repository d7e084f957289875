#!/usr/bin/env python3
"""Per-rank compute speed for `strait plan --rank-speed`, from a `strait train --trace` of a
one-chunk pipeline (one rank per stage, replica 0's actions).

A rank's speed is what the plan profile prices for its layers (F + B + W per microbatch: blocks,
plus the embedding's extra on the first stage and the head's on the last) over what the trace
measured (its F, B and W durations from step 3 on, per microbatch), divided by the fastest rank's,
so the fastest is 1. Prints the speeds as `--rank-speed` takes them, and each rank's figures on
stderr.

  bench/rank_speed.py TRACE PROFILE MICROBATCH_SIZE STAGE_LAYERS
  e.g. bench/rank_speed.py trace.json ~/.cache/strait/plan-profile.json 1 3,3,3,3
PROFILE: `strait plan`'s profile (STRAIT_PLAN_PROFILE) holding the model's shape.
"""
import json
import sys


def main():
    trace_path, profile_path, size, layers = sys.argv[1:5]
    split = [int(x) for x in layers.split(",")]
    stages = len(split)
    with open(trace_path, encoding="utf-8") as f:
        trace = json.load(f)
    if trace.get("otherData", {}).get("chunks", 1) != 1:
        sys.exit("rank_speed.py: the trace has several chunks per rank; trace a one-chunk schedule")
    busy = [0.0] * stages
    forwards = [0] * stages
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in ("F", "B", "W"):
            continue
        if e["args"]["step"] < 2:  # the first two steps warm up
            continue
        busy[e["pid"]] += e["dur"] * 1e-6
        forwards[e["pid"]] += e["cat"] == "F"
    with open(profile_path, encoding="utf-8") as f:
        profile = json.load(f)
    shapes = list(profile["shapes"].values())
    if len(shapes) != 1:
        sys.exit("rank_speed.py: the profile holds %d model shapes; give one with this model only"
                 % len(shapes))
    costs = shapes[0]["sizes"][size]
    ratio = []
    for r in range(stages):
        priced = split[r] * sum(costs["block"])
        priced += sum(costs["first"]) if r == 0 else 0.0
        priced += sum(costs["last"]) if r == stages - 1 else 0.0
        measured = busy[r] / max(1, forwards[r])
        ratio.append(priced / measured)
        print("rank %d: %d layers, measured F+B+W %.2f ms per microbatch, profile %.2f ms"
              % (r, split[r], measured * 1e3, priced * 1e3), file=sys.stderr)
    print(",".join("%.2f" % (x / max(ratio)) for x in ratio))


if __name__ == "__main__":
    main()
