#!/usr/bin/python3
"""torch.optim.AdamW throughput on CPU: the peer of strait_adamw_bench (bench/compare_adamw.sh).

One flat fp32 parameter of N elements (as strait's kernel sees a flat range), a fixed gradient,
torch.set_num_threads(T); each variant the installed torch offers on CPU: the single-tensor loop
(foreach=False), the multi-tensor one (foreach=True) and fused=True where the signature has it
(torch >= 2.x). One warm-up step (which also allocates the state), then --reps timed steps;
prints one JSON object per line with the median and best time. 28 bytes per parameter is the
traffic a fused kernel needs; torch's unfused ops move more, which is the point of the comparison.
"""
import argparse
import inspect
import json
import time

import torch


def variants():
    params = inspect.signature(torch.optim.AdamW.__init__).parameters
    out = [("foreach=False", {"foreach": False}), ("foreach=True", {"foreach": True})]
    if "fused" in params:
        out.append(("fused=True", {"fused": True}))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", "--params", default=str(1 << 24), help="comma-separated counts")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-r", "--reps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for n in (int(x) for x in args.params.split(",")):
        gen = torch.Generator().manual_seed(1)
        for name, kw in variants():
            p = torch.nn.Parameter(torch.rand(n, generator=gen) * 2 - 1)
            p.grad = (torch.rand(n, generator=gen) * 2 - 1) * 1e-2
            try:
                opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                        weight_decay=1e-2, **kw)
                opt.step()  # warm-up
            except (RuntimeError, ValueError) as e:  # e.g. fused needs CUDA in this version
                print(json.dumps({"kind": "torch_adamw", "variant": name, "params": n,
                                  "error": str(e).splitlines()[0]}), flush=True)
                continue
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                opt.step()
                times.append(time.perf_counter() - t0)
            times.sort()
            med, best = times[len(times) // 2], times[0]
            print(json.dumps({"kind": "torch_adamw", "variant": name, "torch": torch.__version__,
                              "params": n, "threads": torch.get_num_threads(), "reps": args.reps,
                              "median_s": med, "best_s": best, "params_per_s": n / med,
                              "best_params_per_s": n / best, "gb_per_s": 28 * n / med / 1e9}),
                  flush=True)
            del opt, p


if __name__ == "__main__":
    main()
