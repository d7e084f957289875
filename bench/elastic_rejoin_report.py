#!/usr/bin/env python3
"""Report and plot of bench/elastic_rejoin.sh: rank 0's loss per step with the loss of a replica and
the rejoin marked, the replicas present on a second axis, and a Markdown summary on stdout."""
import argparse
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--metrics", required=True)
    p.add_argument("--job-log", required=True)
    p.add_argument("--joiner-log", required=True)
    p.add_argument("--killed-at", type=int, required=True)
    p.add_argument("--started-joiner-at", type=int, required=True)
    p.add_argument("--delay", type=float, required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--exit", type=int, required=True)
    p.add_argument("--joiner-exit", type=int, required=True)
    p.add_argument("--png", required=True)
    a = p.parse_args()

    steps, losses, seconds, events, summary, evals = [], [], [], [], None, []
    with open(a.metrics) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == "step":
                steps.append(r["step"])
                losses.append(r["loss"])
                seconds.append(r["seconds"])
            elif r["type"] == "elastic":
                events.append(r)
            elif r["type"] == "summary":
                summary = r
            elif r["type"] == "eval":
                evals.append(r)
    # Replicas present at each step: 3 until the first event, then each event's list.
    present = []
    count = 3
    pending = sorted(events, key=lambda e: e["step"])
    for s in steps:
        while pending and pending[0]["step"] < s:
            count = len(pending.pop(0)["replicas"])
        present.append(count)

    fig, ax = plt.subplots(figsize=(9, 4.8))
    ax.plot(steps, losses, lw=0.6, color="tab:blue", label="training loss (mean over replicas in)")
    for e in events:
        color = "tab:red" if e["event"] == "lost" else "tab:green"
        what = (f"replica {','.join(map(str, e['lost']))} dropped (gen {e['generation']})"
                if e["event"] == "lost" else f"joiner admitted (gen {e['generation']})")
        ax.axvline(e["step"], color=color, ls="--", lw=1, label=f"after step {e['step']}: {what}")
    ax.axvline(a.killed_at, color="black", ls=":", lw=1,
               label=f"SIGKILL to rank 2 (after step {a.killed_at})")
    ax.axvline(a.started_joiner_at, color="grey", ls=":", lw=1,
               label=f"replacement started {a.delay:.0f} s later (after step {a.started_joiner_at})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/byte)")
    ax2 = ax.twinx()
    ax2.step(steps, present, where="post", color="tab:orange", lw=1.2, label="replicas in")
    ax2.set_ylabel("replicas in")
    ax2.set_ylim(0, 4)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="center right")
    ax.set_title("strait train --elastic: 3 DiLoCo replicas, one SIGKILLed, a replacement joins")
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)

    job = open(a.job_log).read()
    joiner = open(a.joiner_log).read()
    ends = re.findall(r"elastic: replica (\d+) \(rank \d+ of \d+, generation \d+\) ends after step "
                      r"(\d+) with weights xxh3 ([0-9a-f]{16})", job + joiner)
    sent = re.findall(r"sent the state of step (\d+) \([^,]+, xxh3 ([0-9a-f]{16})\)", job)
    held = re.findall(r"packs to xxh3 ([0-9a-f]{16})", joiner)
    longest = max(seconds) if seconds else float("nan")
    longest_step = steps[seconds.index(longest)] if seconds else -1
    print(f"# elastic kill-and-rejoin ({len(steps)} steps)\n")
    print(f"- job exit status {a.exit}, joiner exit status {a.joiner_exit}")
    print(f"- rank 2 SIGKILLed after step {a.killed_at}; replacement started {a.delay:.1f} s later, "
          f"after step {a.started_joiner_at}")
    for e in events:
        print(f"- after step {e['step']}: {e['event']} -> replicas {e['replicas']}, generation "
              f"{e['generation']}" + (f", round redone: {e['redone']}" if "redone" in e else ""))
    print(f"- longest step: {longest:.2f} s (step {longest_step}); timeout STRAIT_TIMEOUT_S "
          f"{a.timeout:.0f} s: {'within' if longest < a.timeout else 'NOT within'}")
    print(f"- state sent to the joiner: {sent}; the joiner's own state packs to {held}: "
          f"{'identical' if sent and held and sent[0][1] == held[0] else 'DIFFERENT'}")
    hashes = {h for _, _, h in ends}
    print(f"- final weights: {len(ends)} processes ({', '.join(f'replica {r}' for r, _, _ in ends)}),"
          f" {'all identical' if len(hashes) == 1 else 'DIFFERENT'}"
          f" after step {ends[0][1] if ends else '?'}")
    if summary:
        print(f"- final held-out loss {summary['eval_loss']:.4f} nats/byte")
    print(f"- plot: {a.png}")


if __name__ == "__main__":
    main()
