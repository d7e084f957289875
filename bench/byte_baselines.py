#!/usr/bin/env python3
"""The byte n-gram baselines `strait train` prints, computed apart from strait (a cross-check).

Splits the corpus as scheduler/corpus.h does (every file's last floor(5%) bytes held out; heads
joined by a newline, then tails), counts bytes and byte pairs of the training split, and prints its
plug-in entropies H(X), H(X_t | X_t-1) and the add-one smoothed unigram and bigram cross-entropies
on the targets of the eval windows (scheduler/data.h: --eval-sequences windows of --ctx + 1 bytes
spread evenly over the held-out split), in nats and bits per byte.

usage: bench/byte_baselines.py [DATA] [CTX] [EVAL_SEQUENCES]
       (defaults: /usr/share/games/fortunes 128 128, those of `strait train`)
"""
import math
import os
import sys
from collections import Counter


def texts_of(path):
    if os.path.isfile(path):
        return [open(path, "rb").read()]
    out = []
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.islink(p) or not os.path.isfile(p) or name.endswith(".dat"):
            continue
        b = open(p, "rb").read()
        if b and b"\0" not in b:
            out.append(b)
    return out


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/games/fortunes"
    ctx = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    wanted = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    heads, tails = [], []
    for t in texts_of(data):
        k = math.floor(len(t) * 0.05)
        heads.append(t[: len(t) - k])
        if k:
            tails.append(t[len(t) - k :])
    train, held = b"\n".join(heads), b"\n".join(tails)
    n = len(train)
    uni = Counter(train)
    pairs = Counter(zip(train, train[1:]))
    rows = Counter(train[:-1])
    h1 = -sum(c / n * math.log(c / n) for c in uni.values())
    h2 = -sum(c / (n - 1) * math.log(c / rows[a]) for (a, _), c in pairs.items())
    dense = (len(held) - 1) // ctx
    if wanted == 0 or wanted >= dense:
        offsets = [k * ctx for k in range(dense)]
    elif wanted == 1:
        offsets = [0]
    else:
        span, m = len(held) - ctx - 1, wanted - 1
        offsets = [k * (span // m) + k * (span % m) // m for k in range(wanted)]
    u = b = 0.0
    positions = 0
    for o in offsets:
        for i in range(o + 1, o + ctx + 1):
            u -= math.log((uni[held[i]] + 1) / (n + 256))
            b -= math.log((pairs[(held[i - 1], held[i])] + 1) / (rows[held[i - 1]] + 256))
            positions += 1
    ln2 = math.log(2)
    print(f"{data}: {n} training bytes, {len(held)} held out, {positions} positions scored")
    for name, nats in (
        ("bigram, add-one, held-out cross-entropy", b / positions),
        ("unigram, add-one, held-out cross-entropy", u / positions),
        ("training split H(X_t | X_t-1), plug-in", h2),
        ("training split H(X), plug-in", h1),
    ):
        print(f"  {name:<42} {nats:.4f} nats/byte {nats / ln2:.4f} bits/byte")


if __name__ == "__main__":
    main()
