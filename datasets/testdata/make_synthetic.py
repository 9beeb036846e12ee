#!/usr/bin/python3
"""Goldens for datasets.Synthetic: what PyTorch (1.13, CPU) draws for

    g = torch.Generator(); g.manual_seed(seed)
    X = torch.randn(n, *shape, generator=g)
    Y = torch.randint(0, classes, (n,), generator=g)

Small cases store X and Y whole; the anchor case (60000 x 784, seed 1234,
the benchmark anchors' synthetic MNIST) stores the first and last 64
values of X, sum(X), sum(X^2) (float64) and Y whole as a class histogram
plus its first 64 labels and sum((i+1)*Y[i]).

Run: /usr/bin/python3 make_synthetic.py > synthetic.json
"""
import json

import torch

CASES = [
    (1, [1], 2, 0),          # scalar path (< 16 elements)
    (3, [5], 4, 7),          # 15 elements: scalar path
    (2, [8], 3, 9),          # exactly 16: one Box-Muller block
    (5, [3, 7], 3, 42),      # 105 elements: the last 16 are redrawn
    (60000, [784], 10, 1234),
]


def main():
    out = []
    for n, shape, classes, seed in CASES:
        g = torch.Generator()
        g.manual_seed(seed)
        x = torch.randn(n, *shape, generator=g).flatten()
        y = torch.randint(0, classes, (n,), generator=g)
        c = {"n": n, "shape": shape, "classes": classes, "seed": seed}
        if x.numel() <= 1024:
            c["x"] = x.tolist()
            c["y"] = y.tolist()
        else:
            xd = x.double()
            c["x_head"] = x[:64].tolist()
            c["x_tail"] = x[-64:].tolist()
            c["x_sum"] = xd.sum().item()
            c["x_sumsq"] = (xd * xd).sum().item()
            c["y_head"] = y[:64].tolist()
            c["y_hist"] = torch.bincount(y, minlength=classes).tolist()
            c["y_weighted_sum"] = int(((torch.arange(n) + 1) * y).sum().item())
        out.append(c)
    print(json.dumps({"torch_version": torch.__version__, "cases": out}))


if __name__ == "__main__":
    main()
