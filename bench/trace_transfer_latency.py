#!/usr/bin/python3
"""How long a pipeline's transfers take, from a `strait train --trace` file.

    bench/trace_transfer_latency.py TRACE.json [--skip 2]

For every RECV_F / RECV_B whose rank waited (over 1 ms), the time from the matching SEND's start on
the other rank to the receive's end: the transfer as the critical path sees it, median and worst.
The simulator (scheduler/schedule_sim.h, measured_stage_costs) takes the mean of a similar figure
per sending stage (from the SEND's end, over receives that waited for the whole transfer) when
`strait schedule --from-trace` plans a step. Steps before --skip are warm-up and left out.
"""
import argparse
import json
import statistics


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--skip", type=int, default=2, help="leading steps to leave out")
    a = p.parse_args()
    with open(a.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted({e["args"]["step"] for e in events})[a.skip:]
    waits = {"RECV_F": [], "RECV_B": []}
    for step in steps:
        here = [e for e in events if e["args"]["step"] == step]
        sends = {(e["cat"], e["args"]["stage"] + (1 if e["cat"] == "SEND_F" else -1),
                  e["args"]["microbatch"]): e
                 for e in here if e["cat"] in ("SEND_F", "SEND_B")}
        for e in here:
            if e["cat"] not in waits or e["dur"] <= 1000:
                continue
            send = sends.get(("SEND_" + e["cat"][5:], e["args"]["stage"], e["args"]["microbatch"]))
            if send is not None:
                waits[e["cat"]].append((e["ts"] + e["dur"] - send["ts"]) / 1000)
    for kind, ms in waits.items():
        if ms:
            print(f"{kind}: {len(ms)} waited receives, transfer median {statistics.median(ms):.2f} ms, "
                  f"max {max(ms):.1f} ms (send posted -> receive done)")
        else:
            print(f"{kind}: no receive waited over 1 ms")


if __name__ == "__main__":
    main()
