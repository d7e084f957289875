#!/usr/bin/env python3
"""Loss curves of `strait train` runs side by side, and how far each run's final eval loss is from
the uncompressed run's.

Reads the JSON-lines files `strait train --metrics` writes (one "step" record per step, "eval"
records, a "summary" with the codec), draws the training loss (a moving average, raw curve faint)
and the eval points of every run into one PNG, and prints a Markdown table: final eval loss, its
ratio to the baseline's and whether it is within the run's tolerance.

  plot_convergence.py --baseline none.jsonl --out curves.png RUN.jsonl[=TOLERANCE] ...

TOLERANCE is a fraction (0.02 for 2%); runs without one are listed but not judged. Exit status 1
when a judged run is outside its tolerance, 2 for unreadable input.
"""
import argparse
import json
import sys


def load(path):
    steps, losses, evals, summary = [], [], [], {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"plot_convergence: {path}:{n}: not JSON ({e}); pass the file "
                             "`strait train --metrics` wrote")
                kind = r.get("type")
                if kind == "step":
                    steps.append(r["step"])
                    losses.append(r["loss"])
                elif kind == "eval":
                    evals.append((r["step"], r["eval_loss"]))
                elif kind == "summary":
                    summary = r
    except OSError as e:
        print(f"plot_convergence: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    if not summary:
        print(f"plot_convergence: {path} has no summary record: the run did not finish",
              file=sys.stderr)
        sys.exit(2)
    return steps, losses, evals, summary


def moving_average(xs, window):
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= window:
            acc -= xs[i - window]
        out.append(acc / min(i + 1, window))
    return out


def label_of(summary, path):
    if summary.get("outer_steps", 0) > 0:  # DiLoCo: the outer average's codec and H
        codec = summary.get("outer_codec", "none").split(":")[0]
        overlap = ", overlapped" if summary.get("outer_overlap") else ""
        return (f"DiLoCo H={summary['outer_steps']}, {codec}, outer lr {summary['outer_lr']} "
                f"mu {summary['outer_momentum']}{overlap}")
    codec = summary.get("codec") or "uncompressed"
    if codec == "uncompressed":
        return codec
    # The recipe: what was compressed and after how many uncompressed steps.
    what = summary.get("compress", "gradient")
    warmup = summary.get("codec_warmup_steps")
    return f"{codec} ({what}, warm-up {warmup})" if warmup is not None else codec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="metrics of the uncompressed run")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="strait train: loss with compressed gradient averages")
    ap.add_argument("--window", type=int, default=10, help="moving-average window in steps")
    ap.add_argument("runs", nargs="*", help="metrics files, each optionally =TOLERANCE")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_convergence: matplotlib is missing: apt-get install python3-matplotlib")

    runs = [(args.baseline, None)]
    for spec in args.runs:
        path, _, tol = spec.partition("=")
        runs.append((path, float(tol) if tol else None))

    fig, (ax, ax_eval) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    base_eval = None
    rows, failed = [], False
    for i, (path, tol) in enumerate(runs):
        steps, losses, evals, summary = load(path)
        label = label_of(summary, path)
        color = f"C{i % 10}"
        ax.plot(steps, losses, color=color, alpha=0.15, linewidth=0.7)
        ax.plot(steps, moving_average(losses, args.window), color=color, linewidth=1.4, label=label)
        if evals:
            ax_eval.plot([s for s, _ in evals], [v for _, v in evals], "o-", color=color,
                         label=label, markersize=3)
        final = summary["eval_loss"]
        if base_eval is None:
            base_eval = final
        ratio = final / base_eval
        verdict = "-"
        if tol is not None:
            ok = abs(ratio - 1) <= tol
            failed |= not ok
            verdict = f"{'within' if ok else 'OUTSIDE'} {tol:.0%}"
        rows.append((label, final, ratio, verdict, summary.get("train_seconds", 0.0)))

    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss ({args.window}-step moving average; raw faint)")
    ax.set_ylim(top=min(ax.get_ylim()[1], 4.0))
    ax.grid(alpha=0.3)
    ax.legend()
    ax_eval.set_xlabel("step")
    ax_eval.set_ylabel("held-out eval loss")
    ax_eval.grid(alpha=0.3)
    ax_eval.set_ylim(top=min(ax_eval.get_ylim()[1], 4.0))
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)

    print("| gradient average | final eval loss | vs uncompressed | bar | train time (s) |")
    print("|---|---:|---:|---|---:|")
    for label, final, ratio, verdict, secs in rows:
        print(f"| {label} | {final:.4f} | {ratio:.4f} ({(ratio - 1) * 100:+.2f}%) | {verdict} "
              f"| {secs:.1f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
