#!/usr/bin/python3
"""Checks strait's reference GPT-2 against an independent PyTorch GPT-2, as llm.c's test_gpt2 does.

Usage: gpt2_torch_reference.py MODEL_CHECKPOINT STRAIT_RESULTS

MODEL_CHECKPOINT is a strait checkpoint directory (docs/checkpoints.md) holding the initial
weights; STRAIT_RESULTS is one holding what strait computed from them on one batch: "logits"
[B, T, V], "grad.<parameter>" for every parameter, and in its meta the batch ("tokens",
"targets"), the "loss", the AdamW settings and the "adamw_losses" of 10 steps on that batch.
Both are read through the documented format only (manifest.json, offsets, XXH3-64 checksums).

The model below is GPT-2 written from the paper and nanoGPT's structure (Radford et al. 2019):
learned token and position embeddings, pre-LayerNorm blocks (eps 1e-5), causal self-attention
scaled by 1/sqrt(head size) with q, k, v in that order along c_attn's output, tanh-approximated
GELU, a final LayerNorm and an unembedding tied to the token embedding.

Tolerances: logits 1e-5 (absolute), the loss 1e-5 (absolute), every gradient 1e-4 relative to
its tensor's largest magnitude, all against a float64 forward/backward from strait's float32
weights; the 10 AdamW losses 1e-5 relative against torch.optim.AdamW in float32 (weight decay on
2-D tensors only, as nanoGPT's configure_optimizers). Exit status: 0 when everything matches,
1 when something does not (each mismatch printed), 2 for bad input.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import xxhash
except ImportError:  # checksums are then not verified (Debian: python3-xxhash)
    xxhash = None


def step_dir(path):
    """A checkpoint's step directory: `path` itself, or the one its `latest` file names."""
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    with open(os.path.join(path, "latest")) as f:
        return os.path.join(path, f.read().strip())


def load_checkpoint(path):
    """(meta, {name: float32 ndarray}) from a checkpoint directory, checksums verified."""
    d = step_dir(path)
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != "strait-checkpoint" or manifest.get("version") != 1:
        raise SystemExit(f"{d}: not a version-1 strait checkpoint")
    tensors = {}
    for e in manifest["tensors"]:
        assert e["dtype"] == "f32", e
        with open(os.path.join(d, e["file"]), "rb") as f:
            f.seek(e["offset"])
            raw = f.read(e["bytes"])
        if xxhash is not None and xxhash.xxh3_64_hexdigest(raw) != e["xxh3_64"]:
            raise SystemExit(f"{d}/{e['file']}: tensor {e['name']} fails its checksum")
        tensors[e["name"]] = np.frombuffer(raw, dtype="<f4").reshape(e["shape"]).copy()
    return manifest["meta"], tensors


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, layers, dim, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied unembedding
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def checkpoint_name(torch_name):
    """strait's tensor name for a parameter: the embeddings drop the ".weight"."""
    return torch_name[: -len(".weight")] if torch_name in ("wte.weight", "wpe.weight") else torch_name


def build(meta_model, weights, dtype):
    m = meta_model
    model = GPT(m["vocab"], m["ctx"], m["layers"], m["dim"], m["heads"]).to(dtype)
    names = {checkpoint_name(n) for n, _ in model.named_parameters()}
    if names != set(k for k in weights if not k.startswith("optimizer.")):
        raise SystemExit(f"parameter names differ: {sorted(names ^ set(weights))}")
    with torch.no_grad():
        for n, p in model.named_parameters():
            w = torch.from_numpy(weights[checkpoint_name(n)]).to(dtype)
            if tuple(w.shape) != tuple(p.shape):
                raise SystemExit(f"{n}: checkpoint shape {tuple(w.shape)}, model {tuple(p.shape)}")
            p.copy_(w)
    return model


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    torch.manual_seed(0)
    meta, weights = load_checkpoint(argv[1])
    ref_meta, ref = load_checkpoint(argv[2])
    model_cfg = meta["model"]
    B, T = ref_meta["batch"], ref_meta["seq"]
    tokens = torch.tensor(ref_meta["tokens"], dtype=torch.long).view(B, T)
    targets = torch.tensor(ref_meta["targets"], dtype=torch.long).view(B, T)
    failures = []
    if xxhash is None:
        print("note: python3-xxhash is missing: checksums not verified")

    # Logits, loss and gradients: float64 from the float32 weights.
    model = build(model_cfg, weights, torch.float64)
    logits, loss = model(tokens, targets)
    loss.backward()
    d = np.abs(logits.detach().numpy() - ref["logits"]).max()
    print(f"logits: max |strait - torch| = {d:.3e} (tolerance 1e-5)")
    if not d <= 1e-5:
        failures.append(f"logits differ by {d:.3e}")
    dl = abs(loss.item() - ref_meta["loss"])
    print(f"loss: strait {ref_meta['loss']:.9f} torch {loss.item():.9f} |diff| {dl:.3e}")
    if not dl <= 1e-5:
        failures.append(f"loss differs by {dl:.3e}")
    worst = 0.0
    for n, p in model.named_parameters():
        name = checkpoint_name(n)
        g = p.grad.numpy()
        scale = max(np.abs(g).max(), 1e-30)
        rel = np.abs(g - ref["grad." + name]).max() / scale
        worst = max(worst, rel)
        if not rel <= 1e-4:
            failures.append(f"gradient of {name} differs by {rel:.3e} of its largest value")
    print(f"gradients: {len(list(model.parameters()))} tensors, worst max |diff| / max |g| = "
          f"{worst:.3e} (tolerance 1e-4)")

    # 10 AdamW steps in float32 on the same batch.
    model = build(model_cfg, weights, torch.float32)
    opt = ref_meta["adamw"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    strait_losses = ref_meta["adamw_losses"]
    for i, want in enumerate(strait_losses):
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(tokens, targets)
        loss.backward()
        optimizer.step()
        rel = abs(loss.item() - want) / abs(want)
        print(f"AdamW step {i + 1:2d}: strait {want:.7f} torch {loss.item():.7f} rel {rel:.2e}")
        if not rel <= 1e-5:
            failures.append(f"AdamW step {i + 1}: loss differs by {rel:.3e} relative")

    for f in failures:
        print("MISMATCH:", f)
    print("all match" if not failures else f"{len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
