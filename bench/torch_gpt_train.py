#!/usr/bin/python3
"""The peer of `strait train` on one rank: the same GPT-2 (pre-LayerNorm, tanh GELU, learned
positions, tied byte embedding), the same batch and AdamW, in PyTorch on the CPU, timed per step.

    torch_gpt_train.py --threads 1 --layers 4 --dim 128 --heads 4 --ctx 128 --batch 16 \
        --steps 30 --warmup 5 --data FILE [--json OUT]

Reads bytes of FILE as tokens (random windows of ctx + 1 bytes, a fixed seed), trains with
torch.optim.AdamW (weight decay 0.1 on 2-D tensors, as nanoGPT), gradient clipping at 1.0, and
reports tokens per second over the steps after --warmup (the first steps allocate and warm caches,
as strait's are). One step = one optimizer step over `batch` sequences (strait splits the same
batch into microbatches; the work is the same).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def attention(self, x, mask):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def forward(self, x, mask):
        x = x + self.attention(self.ln_1(x), mask)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, ctx, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.register_buffer("mask", ~torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied unembedding
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="untimed first steps")
    p.add_argument("--data", required=True)
    p.add_argument("--json")
    a = p.parse_args()
    if a.steps <= a.warmup:
        raise SystemExit("--steps must exceed --warmup")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    with open(a.data, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    if data.numel() <= a.ctx + 1:
        raise SystemExit(f"{a.data}: fewer than ctx + 1 = {a.ctx + 1} bytes")
    model = GPT(a.layers, a.dim, a.heads, a.ctx)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    other = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95))
    start = None
    for step in range(a.steps):
        if step == a.warmup:
            start = time.perf_counter()
        ix = torch.randint(data.numel() - a.ctx - 1, (a.batch,))
        x = torch.stack([data[i:i + a.ctx] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.ctx] for i in ix])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    seconds = time.perf_counter() - start
    timed = a.steps - a.warmup
    tps = timed * a.batch * a.ctx / seconds
    result = {"peer": "pytorch", "torch": torch.__version__, "threads": a.threads,
              "layers": a.layers, "dim": a.dim, "batch": a.batch, "ctx": a.ctx,
              "timed_steps": timed, "seconds": seconds, "tokens_per_s": tps,
              "final_loss": float(loss)}
    print(f"pytorch {torch.__version__}, {a.threads} thread(s): {tps:.0f} tokens/s "
          f"({seconds / timed * 1e3:.1f} ms per step of {a.batch} x {a.ctx}), loss {float(loss):.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
