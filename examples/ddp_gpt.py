#!/usr/bin/python3
r"""Data-parallel training of a small GPT with torch DDP over strait (or Gloo), optionally with a
strait compression hook on the gradient buckets.

    build/strait run -n 2 -- /usr/bin/python3 examples/ddp_gpt.py --backend strait --hook int8
    /usr/bin/torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
        examples/ddp_gpt.py --backend gloo --hook int8

(torch 1.13's torchrun spells it --nproc_per_node; under Python 3.11 it needs --redirects 1
--tee 1, its default 0 being parsed to None: examples/README.md.)

The model is strait's reference transformer (scheduler/transformer.h) in torch: GPT-2 with pre-LN
blocks, tanh-GELU, learned positions, an unembedding tied to the token embedding, and bytes as
tokens (vocab 256); GPT-2 initialisation (N(0, 0.02), residual projections N(0, 0.02/sqrt(2L))).
The data is the text of Debian's fortunes package, split as strait's corpus does
(scheduler/corpus.cpp): every file keeps the last 5% of its bytes for evaluation.

Each step every rank draws its own --batch sequences from the global batch of
world_size * --batch sequences (the draw depends on --seed and the step only), so the run is
reproducible and the same for every backend. Printed per step (rank 0): the loss averaged over
ranks and the step time; at the end the held-out loss. --log FILE writes the same as JSON lines
(rank 0), --check-identical compares a hash of the parameters of all ranks after every step.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

# The strait package (python) when run from a checkout without PYTHONPATH.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

FORTUNES = "/usr/share/games/fortunes"


# ---- data ------------------------------------------------------------------------------------

def load_corpus(path=FORTUNES, eval_fraction=0.05, separator=b"\n"):
    """(train, held_out) as uint8 tensors, split as strait's ByteCorpus::load: files in name
    order, skipping symlinks, *.dat indexes, empty and binary files; each file's last
    floor(n * eval_fraction) bytes are held out; heads and tails joined by separator."""
    if os.path.isfile(path):
        data = open(path, "rb").read()
        cut = len(data) - math.floor(len(data) * eval_fraction)
        return torch.frombuffer(bytearray(data[:cut]), dtype=torch.uint8), \
            torch.frombuffer(bytearray(data[cut:]), dtype=torch.uint8)
    if not os.path.isdir(path):
        raise SystemExit(f"ddp_gpt: data path {path} does not exist: pass --data FILE|DIR or "
                         "install the fortunes package (scripts/setup.sh does)")
    heads, tails = [], []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.islink(full) or not os.path.isfile(full) or name.endswith(".dat"):
            continue
        data = open(full, "rb").read()
        if not data or b"\0" in data:
            continue
        tail = math.floor(len(data) * eval_fraction)
        heads.append(data[:len(data) - tail])
        if tail:
            tails.append(data[len(data) - tail:])
    if not heads:
        raise SystemExit(f"ddp_gpt: {path} has no usable text files")
    return (torch.frombuffer(bytearray(separator.join(heads)), dtype=torch.uint8),
            torch.frombuffer(bytearray(separator.join(tails)), dtype=torch.uint8))


def batch(text, step, seed, rank, per_rank, world, ctx):
    """This rank's (tokens, targets) [per_rank, ctx] int64 for `step`: the global batch's offsets
    come from a generator seeded by (seed, step), rank r takes sequences r*per_rank .. +per_rank."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, text.numel() - ctx - 1, (world * per_rank,), generator=g)
    mine = starts[rank * per_rank:(rank + 1) * per_rank]
    rows = torch.stack([text[s:s + ctx + 1] for s in mine.tolist()]).long()
    return rows[:, :-1], rows[:, 1:]


# ---- model -----------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, heads, layers):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.attn_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)
        for lin in (self.c_attn, self.c_fc):
            nn.init.normal_(lin.weight, std=0.02)
            nn.init.zeros_(lin.bias)
        for lin in (self.attn_proj, self.mlp_proj):  # residual projections (GPT-2)
            nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * layers))
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 as scheduler/transformer.h: tokens [B, T] int64 -> logits [B, T, vocab] float32."""

    def __init__(self, vocab=256, ctx=128, layers=4, dim=128, heads=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.h = nn.ModuleList(Block(dim, heads, layers) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied unembedding


def loss_of(model, tokens, targets):
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def param_hash(model):
    """The first 8 bytes of the SHA-256 of all parameters' bytes, as an int64 tensor [1]."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return torch.tensor([int.from_bytes(h.digest()[:8], "little", signed=True)], dtype=torch.int64)


@torch.no_grad()
def held_out_loss(model, text, ctx, windows):
    """Mean loss over the first `windows` non-overlapping ctx-byte windows of the held-out text
    (fewer if it is shorter): the same fixed set for every run."""
    n = min(windows, (text.numel() - 1) // ctx)
    rows = torch.stack([text[i * ctx:i * ctx + ctx + 1] for i in range(n)]).long()
    losses = [loss_of(model, rows[i:i + 16, :-1], rows[i:i + 16, 1:]).item() * rows[i:i + 16].shape[0]
              for i in range(0, n, 16)]
    return sum(losses) / n


# ---- training --------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="gloo", choices=["gloo", "strait"],
                   help="torch.distributed backend of the process group")
    p.add_argument("--hook", default="NONE",
                   help="NONE (no hook: DDP's own allreduce over the backend) or a strait codec "
                        "spec for strait.torch.hooks.compressed_allreduce: int8, "
                        "topk:fraction=0.01, powersgd:rank=4, ..., or none (the hook with "
                        "strait's plain allreduce)")
    p.add_argument("--start-iter", type=int, default=10,
                   help="hook: steps of plain averaging before compression (default 10)")
    p.add_argument("--no-error-feedback", action="store_true", help="hook: no error feedback")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    p.add_argument("--eval-windows", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--data", default=FORTUNES)
    p.add_argument("--log", help="rank 0 writes one JSON object per step and one at the end")
    p.add_argument("--check-identical", action="store_true",
                   help="after every step, fail unless all ranks hold bit-identical parameters")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    return p.parse_args(argv)


def init_group(backend):
    if backend == "strait":
        try:
            import strait.torch  # noqa: F401  (registers the "strait" backend)
            dist.Backend("strait")
        except (ImportError, ValueError) as e:
            raise SystemExit(f"ddp_gpt: --backend strait needs the strait package "
                             f"(python on PYTHONPATH, libstrait.so built): {e}")
    dist.init_process_group(backend=backend)


def train(args, process_group=None, hook=None, log=None):
    """Trains args.steps steps with DDP over process_group (None: the default group) and returns
    {"losses": [per-step loss averaged over ranks], "held_out_loss", "median_step_s", ...}.

    hook: None for args.hook, else (state, hook_fn) to register (the tests wrap the hook). With
    args.check_identical, raises RuntimeError at the first step whose parameters differ between
    ranks. Every rank must call it alike (it is collective)."""
    rank = dist.get_rank(process_group)
    world = dist.get_world_size(process_group)
    train_text, eval_text = load_corpus(args.data)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts)
    model = GPT(256, args.ctx, args.layers, args.dim, args.heads)
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb, process_group=process_group)
    state = None
    if hook is not None:
        state, fn = hook
        ddp.register_comm_hook(state, fn)
    elif args.hook != "NONE":
        from strait.torch import hooks
        state = hooks.CompressionState(codec=args.hook, start_iter=args.start_iter,
                                       process_group=process_group,
                                       error_feedback=not args.no_error_feedback)
        ddp.register_comm_hook(state, hooks.compressed_allreduce)
    # Weight decay on 2-D tensors only (nanoGPT, transformer.h).
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr,
                            foreach=True)  # one multi-tensor kernel per op, not a loop
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0 and not args.quiet:
        backend = dist.get_backend(process_group)
        print(f"ddp_gpt: {world} ranks, backend {backend}, hook {args.hook if hook is None else 'given'}, "
              f"{nparams} parameters ({nparams * 4 / 2**20:.2f} MiB of f32 gradients), "
              f"{train_text.numel()} train bytes, {eval_text.numel()} held-out bytes", flush=True)

    step_times, losses, phases = [], [], []
    for step in range(args.steps):
        tokens, targets = batch(train_text, step, args.seed, rank, args.batch, world, args.ctx)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(ddp, tokens, targets)
        t_fwd = time.perf_counter()
        loss.backward()  # returns once DDP has waited for every bucket's allreduce
        t_bwd = time.perf_counter()
        opt.step()
        elapsed = time.perf_counter() - start
        phases.append((t_fwd - start, t_bwd - t_fwd, start + elapsed - t_bwd))
        step_times.append(elapsed)
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, group=process_group)
        mean_loss = mean_loss.item() / world
        losses.append(mean_loss)
        identical = None
        if args.check_identical:
            h = param_hash(model)
            hashes = [torch.zeros_like(h) for _ in range(world)]
            dist.all_gather(hashes, h, group=process_group)
            identical = all(int(x) == int(hashes[0]) for x in hashes)
            if not identical:
                raise RuntimeError(f"ddp_gpt: step {step}: parameters differ between ranks "
                                   f"(hashes {[int(x) for x in hashes]})")
        if rank == 0:
            if not args.quiet:
                print(f"step {step:4d} loss {mean_loss:.6f} time {elapsed * 1e3:.1f} ms",
                      flush=True)
            if log:
                rec = {"step": step, "loss": mean_loss, "time_s": elapsed}
                if identical is not None:
                    rec["identical"] = identical
                log.write(json.dumps(rec) + "\n")
                log.flush()

    held = held_out_loss(model, eval_text, args.ctx, args.eval_windows)
    steady = sorted(step_times[min(2, len(step_times) - 1):])  # skip the first (bucket rebuild)
    median = steady[len(steady) // 2] if steady else float("nan")
    summary = {"final": True, "backend": dist.get_backend(process_group), "hook": args.hook,
               "steps": args.steps, "held_out_loss": held, "median_step_s": median,
               "mean_step_s": sum(steady) / max(len(steady), 1), "params": nparams,
               "world_size": world}
    # Where a step's time goes (medians over the steady steps): forward, backward including the
    # wait for the last buckets' allreduce, optimizer.
    skip = min(2, len(phases) - 1)
    summary["phases_s"] = {k: sorted(v)[len(v) // 2] for k, v in zip(
        ("forward", "backward", "optimizer"), zip(*phases[skip:]))} if phases[skip:] else {}
    if state is not None and hasattr(state, "stats"):
        summary["hook_allreduce_bytes"] = state.stats()["allreduceBytes"]
    if rank == 0:
        print(f"held-out loss {held:.6f} after {args.steps} steps; median step "
              f"{median * 1e3:.1f} ms", flush=True)
        if log:
            log.write(json.dumps(summary) + "\n")
    if state is not None and hook is None:
        state.close()
    summary["losses"] = losses
    summary["step_times"] = step_times
    return summary


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    init_group(args.backend)
    log = open(args.log, "w") if args.log and dist.get_rank() == 0 else None
    try:
        train(args, log=log)
    except RuntimeError as e:
        raise SystemExit(str(e))
    if log:
        log.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
