#!/usr/bin/env python3
"""Report and plot of bench/elastic_rejoin.sh: rank 0's loss per step with the loss of a replica and
the rejoin marked, the replicas present on a second axis, and a Markdown summary on stdout. On the
WAN testbed (--link-csv), a second panel shows the traffic across the inter-site link per second
as the shapers counted it, and the summary sets the shapers' bytes against strait's own."""
import argparse
import csv
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_link(path):
    """(steps, Mbit/s) per interval of the sampled shaper counters."""
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append((float(r["seconds"]), int(r["steps"]), int(r["link_bytes"])))
    steps, mbits = [], []
    for (t0, _, b0), (t1, s1, b1) in zip(rows, rows[1:]):
        if t1 > t0:
            steps.append(s1)
            mbits.append((b1 - b0) * 8 / (t1 - t0) / 1e6)
    return steps, mbits, (rows[-1][2] - rows[0][2]) if rows else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--metrics", required=True)
    p.add_argument("--job-log", required=True)
    p.add_argument("--joiner-log", required=True, nargs="+", help="one per stage")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--stages", type=int, default=1)
    p.add_argument("--victim", type=int, default=2)
    p.add_argument("--killed-at", type=int, required=True)
    p.add_argument("--started-joiner-at", type=int, required=True)
    p.add_argument("--delay", type=float, required=True)
    p.add_argument("--joiner-waited", type=float, default=None,
                   help="seconds from the joiner's start to its admission")
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--exit", type=int, required=True)
    p.add_argument("--joiner-exit", type=int, required=True)
    p.add_argument("--link-csv", help="WAN: the shapers' counters sampled each second")
    p.add_argument("--link-bytes", type=int, help="WAN: bytes across the link, whole run")
    p.add_argument("--rate", default="", help="WAN: the link's rate, for the title")
    p.add_argument("--png", required=True)
    a = p.parse_args()

    steps, losses, seconds, events, summary, outer_bytes = [], [], [], [], None, 0
    computed = []  # replicas that computed each step ("replicas_in_step"), when recorded
    with open(a.metrics) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == "step":
                steps.append(r["step"])
                losses.append(r["loss"])
                seconds.append(r["seconds"])
                outer_bytes += r.get("outer_bytes", 0)
                computed.append(r.get("replicas_in_step"))
            elif r["type"] == "elastic":
                events.append(r)
            elif r["type"] == "summary":
                summary = r
    # Replicas present at each step: those that computed it when the records say so; else all of
    # them until the first event, then each event's list.
    if computed and None not in computed:
        present = computed
    else:
        present = []
        count = a.replicas
        pending = sorted(events, key=lambda e: e["step"])
        for s in steps:
            while pending and pending[0]["step"] < s:
                count = len(pending.pop(0)["replicas"])
            present.append(count)

    if a.link_csv:
        fig, (ax, axl) = plt.subplots(2, 1, figsize=(9, 6.8), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.3]})
    else:
        fig, ax = plt.subplots(figsize=(9, 4.8))
    # A step rank 0 saw alone in a broken world, as a stage without the loss, has none to show.
    shown = [float("nan") if n == 0 else x for x, n in zip(losses, present)]
    ax.plot(steps, shown, lw=0.6, color="tab:blue", label="training loss (mean over replicas in)")
    marks = []
    for e in events:
        color = "tab:red" if e["event"] == "lost" else "tab:green"
        what = (f"replica {','.join(map(str, e['lost']))} dropped (gen {e['generation']})"
                if e["event"] == "lost" else f"joiner admitted (gen {e['generation']})")
        marks.append((e["step"], color, "--", f"after step {e['step']}: {what}"))
    marks.append((a.killed_at, "black", ":", f"SIGKILL to rank {a.victim} (after step {a.killed_at})"))
    marks.append((a.started_joiner_at, "grey", ":",
                  f"replacement started {a.delay:.0f} s later (after step {a.started_joiner_at})"
                  + (f", {a.stages} processes" if a.stages > 1 else "")))
    for x, color, ls, label in marks:
        ax.axvline(x, color=color, ls=ls, lw=1, label=label)
    ax.set_ylabel("loss (nats/byte)")
    ax2 = ax.twinx()
    ax2.step(steps, present, where="mid", color="tab:orange", lw=1.2,
             label="replicas that computed the step")
    ax2.set_ylabel("replicas computing")
    ax2.set_ylim(0, a.replicas + 1)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper right")
    shape = f" of {a.stages} stages" if a.stages > 1 else ""
    where = (f"{a.replicas} sites at {a.rate} (WAN testbed), one replica{shape} each" if a.link_csv
             else f"{a.replicas} DiLoCo replicas{shape} on loopback")
    ax.set_title(f"strait train --elastic: {where};\none SIGKILLed, a replacement joins",
                 fontsize=10)
    link_total = None
    if a.link_csv:
        lsteps, mbits, link_total = read_link(a.link_csv)
        axl.plot(lsteps, mbits, lw=0.8, color="tab:purple", drawstyle="steps-pre")
        for x, color, ls, _ in marks:
            axl.axvline(x, color=color, ls=ls, lw=1)
        axl.set_ylabel("link Mbit/s\n(shapers, 1 s)")
        axl.set_xlabel("step (rank 0)")
    else:
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)

    job = open(a.job_log).read()
    joiner = "".join(open(path).read() for path in a.joiner_log)
    # (replica, stage, step, hash); stage "" without stages.
    ends = re.findall(r"elastic: replica (\d+)(?: stage (\d+))? \(rank \d+ of \d+, generation \d+\) "
                      r"ends after step (\d+) with weights xxh3 ([0-9a-f]{16})", job + joiner)
    sent = {stage: h for h, stage in re.findall(
        r"sent the state of step \d+ \([^,]+, xxh3 ([0-9a-f]{16})\) to the joiners"
        r"(?: of stage (\d+))?", job)}
    held = {stage: h for stage, h in re.findall(
        r"joined as replica \d+(?: stage (\d+))? \(.*packs to xxh3 ([0-9a-f]{16})", joiner)}
    longest = max(seconds) if seconds else float("nan")
    longest_step = steps[seconds.index(longest)] if seconds else -1
    print(f"# elastic kill-and-rejoin ({len(steps)} steps, {where})\n")
    print(f"- job exit status {a.exit}, joiner exit status {a.joiner_exit}")
    print(f"- rank {a.victim} SIGKILLed after step {a.killed_at}; replacement "
          + (f"({a.stages} processes, one per stage) " if a.stages > 1 else "")
          + f"started {a.delay:.1f} s later, after step {a.started_joiner_at}")
    for e in events:
        print(f"- after step {e['step']}: {e['event']} -> replicas {e['replicas']}, generation "
              f"{e['generation']}" + (f", round redone: {e['redone']}" if "redone" in e else "")
              + (f", state sent: {e['state_bytes']:,} B" if "state_bytes" in e else ""))
    alone = [s for s, n in zip(steps, present) if n < a.replicas]
    if alone:
        print(f"- steps computed by fewer than {a.replicas} replicas: {len(alone)} "
              f"(steps {alone[0]}-{alone[-1]})")
    within = longest < a.timeout and (a.joiner_waited is None or a.joiner_waited < a.timeout)
    print(f"- longest step (rank 0): {longest:.2f} s (step {longest_step})"
          + (f"; the joiner{'s' if a.stages > 1 else ''} waited {a.joiner_waited:.1f} s from "
             f"{'their' if a.stages > 1 else 'its'} start to {'their' if a.stages > 1 else 'its'} "
             "admission"
             if a.joiner_waited is not None else "")
          + f"; timeout STRAIT_TIMEOUT_S {a.timeout:.0f} s: {'within' if within else 'NOT within'}")
    if not sent:
        print("- no state was sent: the replacement was NOT admitted")
    else:
        print(f"- state sent to the joiners (xxh3 by stage): {sent}; the joiners' own state packs "
              f"to {held}: {'identical' if sent == held else 'DIFFERENT'}")
    by_stage = {}
    for replica, stage, _, h in ends:
        by_stage.setdefault(stage, {})[replica] = h
    for stage, hashes in sorted(by_stage.items()):
        print(f"- final weights{f' of stage {stage}' if stage else ''}: {len(hashes)} processes "
              f"({', '.join(f'replica {r}' for r in sorted(hashes))}), "
              f"{'all identical' if len(set(hashes.values())) == 1 else 'DIFFERENT'} after step "
              f"{ends[0][2] if ends else '?'}")
    if summary:
        print(f"- final held-out loss {summary['eval_loss']:.4f} nats/byte")
    if a.link_csv:
        state = sum(e.get("state_bytes", 0) for e in events)
        ours = outer_bytes + state
        total = a.link_bytes if a.link_bytes is not None else link_total
        print(f"- bytes across the link: shapers {total:,} (both directions, IP packets); strait "
              f"{ours:,} (outer averages {outer_bytes:,} + state to the joiner {state:,}); "
              f"shapers / strait {total / ours:.3f}" if ours else "")
    print(f"- plot: {a.png}")


if __name__ == "__main__":
    main()
