#!/usr/bin/python3
"""Gantt chart of pipeline schedules: one row per rank, a colour per action kind.

Reads the JSON that `strait schedule --png` writes next to the PNG (and passes here):

  {"title": "...", "unit": "time units",
   "panels": [{"label": "planned", "ranks": P, "makespan": T, "bubble": 0.2,
               "events": [{"rank": 0, "kind": "F", "name": "0F3", "chunk": 0,
                           "start": 0.0, "end": 1.0}]}]}

and draws the panels one above the other on a shared time axis, as the figures of the zero-bubble
paper (Qi et al. 2023) do: F, B and W boxes labelled with their microbatch, a rank's later
chunks hatched, idle time white.

  plot_schedule.py IN.json OUT.png

Exit status 2 when the input cannot be read or has no panel.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868"}
LABELS = {"F": "F (forward)", "B": "B (backward: input gradient, + weights when no W)",
          "W": "W (weight gradient)"}


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            spec = json.load(f)
        panels = spec["panels"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_schedule: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    if not panels:
        print(f"plot_schedule: {argv[1]} has no panel", file=sys.stderr)
        return 2
    span = max(p["makespan"] for p in panels) or 1.0
    rows = sum(p["ranks"] for p in panels)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, sharex=True,
                             figsize=(min(24, 6 + span * 0.25), 1.0 + 0.45 * rows + 0.6 * len(panels)))
    for ax, panel in zip(axes[:, 0], panels):
        ranks = panel["ranks"]
        for e in panel["events"]:
            kind = e["kind"]
            if kind not in COLOURS:
                continue
            width = e["end"] - e["start"]
            y = ranks - 1 - e["rank"]  # rank 0 on top
            # A rank's later chunks (interleaved, ZB-V) are hatched.
            ax.barh(y, width, left=e["start"], height=0.8, color=COLOURS[kind],
                    edgecolor="black", linewidth=0.4, hatch="//" if e.get("chunk", 0) else None)
            if width >= span / 60:
                mb = e["name"].split(kind)[-1]
                ax.text(e["start"] + width / 2, y, mb, ha="center", va="center", fontsize=7,
                        color="white")
        ax.set_yticks(range(ranks))
        ax.set_yticklabels([f"rank {ranks - 1 - i}" for i in range(ranks)])
        ax.set_xlim(0, span)
        title = panel["label"]
        if "bubble" in panel:
            title += f"  (bubble {panel['bubble']:.3f}, step {panel['makespan']:.4g} {spec.get('unit', '')})"
        ax.set_title(title, fontsize=10, loc="left")
    axes[-1, 0].set_xlabel(spec.get("unit", "time"))
    fig.suptitle(spec.get("title", "pipeline schedule"), fontsize=11)
    fig.legend(handles=[Patch(color=COLOURS[k], label=LABELS[k]) for k in COLOURS],
               loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
