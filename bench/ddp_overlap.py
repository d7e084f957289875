#!/usr/bin/python3
"""Does DDP (no comm hook, uncompressed) hide its gradient traffic behind backward? One rank of a
2-rank job (bench/compare_ddp_overlap.sh starts it under `strait run` or `strait wan run`).

The model: --layers Linear(dim, dim) + ReLU, f32, batch --batch; DDP buckets of --bucket-mb from
the second step (the first bucket too: dist._DEFAULT_FIRST_BUCKET_BYTES is set to the same), so
the gradients travel in several buckets. In ROUNDS rounds (each round runs every configuration
for STEPS steps after one warm-up step, so all see the same load), it times per step:
  compute       forward + backward + SGD step of the plain model, no communication (both ranks
                compute at once, as under DDP);
  comm_strait / comm_gloo
                the same buckets' allreduces alone (sizes as DDP's rebuilt buckets: parameters in
                backward order), all posted async_op=True, then waited for;
  ddp_strait    DDP over strait, C++ callers getting pending Works (STRAIT_TORCH_CPP_WORK=pending:
                completed by the compiled extension's C++ thread when it is built);
  ddp_strait_python   the same completed by the Python completer (STRAIT_TORCH_CPP_WORK=python);
  ddp_strait_finished   the same with finished Works (each bucket's allreduce blocks backward);
  ddp_gloo      DDP over Gloo.
Reported: the median step of each over all rounds (max over ranks of each step), and
bar = 0.75 x (compute + comm of that backend). --trace DIR: one DDP step over strait (pending)
under the torch profiler, written as a Chrome trace, and a summary of its allreduce spans
against backward (printed); the same for one DDP step over Gloo. --json FILE: the figures.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import strait.torch  # noqa: E402,F401 (registers the backend)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--bucket-mb", type=float, default=4.0)
    p.add_argument("--steps", type=int, default=4, help="timed steps per round and config")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="each layer's backward also sleeps this long (its forward half): compute "
                        "that takes time but no CPU, to see the overlap on a machine whose cores "
                        "are busy")
    p.add_argument("--trace", help="folder for the Chrome trace of one DDP step over strait")
    p.add_argument("--json", help="rank 0 writes the figures here")
    return p.parse_args()


class _Sleep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        time.sleep(seconds / 2)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad, None


class Sleep(nn.Module):
    def __init__(self, ms):
        super().__init__()
        self.seconds = ms / 1e3

    def forward(self, x):
        return _Sleep.apply(x, self.seconds)


def make_model(args):
    torch.manual_seed(1)
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.dim, args.dim), nn.ReLU()]
        if args.sleep_ms:
            layers.append(Sleep(args.sleep_ms))
    return nn.Sequential(*layers)


def make_ddp(args, group):
    model = make_model(args)
    return nn.parallel.DistributedDataParallel(model, process_group=group,
                                               bucket_cap_mb=args.bucket_mb)


def bucket_sizes(model, args):
    """Bytes of DDP's rebuilt buckets: parameters in the order backward makes their gradients
    (reverse of definition for a Sequential), cut at --bucket-mb as the Reducer cuts them."""
    params = list(reversed(list(model.parameters())))
    cap = int(args.bucket_mb * 1024 * 1024)
    buckets, _ = dist._compute_bucket_assignment_by_size(params, [cap, cap])
    return [sum(params[i].numel() for i in b) for b in buckets]


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=GLOO)
    return t.item()


def timed_steps(fn, steps):
    out = []
    for _ in range(steps):
        dist.barrier(group=GLOO)
        start = time.perf_counter()
        fn()
        out.append(slowest(time.perf_counter() - start))
    return out


class Train:
    """One configuration's model, optimizer and data (same seed for all)."""

    def __init__(self, args, net):
        self.net = net
        self.opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        self.x = torch.randn(args.batch, args.dim, generator=torch.Generator().manual_seed(2))

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        self.net(self.x).square().mean().backward()
        self.opt.step()


class Comm:
    """The buckets' allreduces alone on `group`."""

    def __init__(self, sizes, group):
        self.bufs = [torch.ones(n) for n in sizes]
        self.group = group

    def step(self):
        works = [dist.all_reduce(b, group=self.group, async_op=True) for b in self.bufs]
        for w in works:
            w.wait()


def trace_step(train, out_dir, rank, name, span_prefix):
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train.opt.zero_grad(set_to_none=True)
        loss = train.net(train.x).square().mean()
        with record_function("ddp_step::backward"):
            loss.backward()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}_rank{rank}.json")
    prof.export_chrome_trace(path)
    evs = prof.events()
    bwd = next(e for e in evs if e.name == "ddp_step::backward")
    b0 = bwd.time_range.start
    grads = [e for e in evs if e.name.startswith("autograd::engine::evaluate_function: ")]
    last_grad = max(e.time_range.end for e in grads)
    spans = sorted((e for e in evs if e.name.startswith(span_prefix)),
                   key=lambda e: e.time_range.start)
    lines = [f"rank {rank}: {path}",
             f"  backward 0.0 .. {(bwd.time_range.end - b0) / 1e3:.1f} ms; last gradient "
             f"computed at {(last_grad - b0) / 1e3:.1f} ms"]
    for i, e in enumerate(spans):
        inside = "inside compute" if e.time_range.start < last_grad else "after compute"
        lines.append(f"  bucket {i}: {e.name:34s} {(e.time_range.start - b0) / 1e3:7.1f} .. "
                     f"{(e.time_range.end - b0) / 1e3:7.1f} ms  (posted {inside})")
    return "\n".join(lines)


def main():
    global GLOO
    args = parse_args()
    torch.set_num_threads(args.threads)
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_mb * 1024 * 1024)
    os.environ["STRAIT_TORCH_CPP_WORK"] = "pending"
    dist.init_process_group("strait")
    rank = dist.get_rank()
    GLOO = dist.new_group(backend="gloo")
    os.environ["STRAIT_TORCH_CPP_WORK"] = "finished"
    finished = dist.new_group(backend="strait")
    os.environ["STRAIT_TORCH_CPP_WORK"] = "python"
    python_completed = dist.new_group(backend="strait")
    os.environ["STRAIT_TORCH_CPP_WORK"] = "pending"
    native = dist.group.WORLD._native is not None
    sizes = bucket_sizes(make_model(args), args)
    configs = {
        "compute": Train(args, make_model(args)),
        "comm_strait": Comm(sizes, dist.group.WORLD),
        "comm_gloo": Comm(sizes, GLOO),
        "ddp_strait": Train(args, make_ddp(args, dist.group.WORLD)),
        "ddp_strait_python": Train(args, make_ddp(args, python_completed)),
        "ddp_strait_finished": Train(args, make_ddp(args, finished)),
        "ddp_gloo": Train(args, make_ddp(args, GLOO)),
    }
    times = {k: [] for k in configs}
    for _ in range(args.rounds):
        for name, c in configs.items():
            c.step()  # warm-up (and DDP's bucket rebuild after its first step)
            times[name] += timed_steps(c.step, args.steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    if args.trace:  # Gloo's Works have spans of torch's own (gloo:all_reduce)
        summary = trace_step(configs["ddp_strait"], args.trace, rank, "ddp_strait",
                             "strait::allreduce") + "\n" + \
            trace_step(configs["ddp_gloo"], args.trace, rank, "ddp_gloo", "gloo:all_reduce")
        for r in range(dist.get_world_size()):
            if r == rank:
                print(summary, flush=True)
            dist.barrier(group=GLOO)
    if rank == 0:
        params = sum(p.numel() for p in make_model(args).parameters())
        sleep = f" + {args.sleep_ms} ms of sleep per layer's backward" if args.sleep_ms else ""
        print(f"# model {args.layers} x Linear({args.dim}, {args.dim}){sleep}, {params / 1e6:.2f} M "
              f"parameters, {4 * params / 2**20:.1f} MiB of gradients in {len(sizes)} buckets "
              f"of {args.bucket_mb} MiB, batch {args.batch}; median of {args.rounds} x "
              f"{args.steps} steps, load {os.getloadavg()[0]:.2f}; ddp_strait's Works are "
              f"completed in {'C++ (the extension)' if native else 'Python (no extension)'}")
        print("| config | median step (ms) | vs 0.75 x (compute + comm) |")
        print("|---|---:|---:|")
        for k in configs:
            line = f"| {k} | {1e3 * med[k]:.1f} |"
            if k.startswith("ddp_"):
                comm = med["comm_gloo" if k == "ddp_gloo" else "comm_strait"]
                bar = 0.75 * (med["compute"] + comm)
                line += f" {med[k] / bar:.2f} (bar {1e3 * bar:.1f} ms) |"
            else:
                line += " |"
            print(line)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "buckets": sizes, "median_s": med,
                           "native": native, "steps_s": times, "load": os.getloadavg()[0]}, f)
    dist.barrier(group=GLOO)


if __name__ == "__main__":
    main()
