#!/usr/bin/python3
"""Goldens for datasets.WindowStream: the window starts PyTorch (1.13, CPU)
draws for the GPT-mini anchor's batches (gpt_mini.Batches):

    g = torch.Generator(); g.manual_seed(seed)
    starts = torch.randint(0, n_train - context, (world * batch,), generator=g)

once per step. Only n_train - context matters, so each case names the
text length and context; the Opticks case (567,198 bytes, context 64)
is the anchor's. Every case stores the whole draw of each step; rank r of
the job keeps starts[r*batch:(r+1)*batch].

Run: /usr/bin/python3 make_gptbytes.py > gptbytes.json
"""
import json

import torch

CASES = [
    # (text bytes, context, seed, world, batch, steps)
    (567198, 64, 0, 1, 32, 3),
    (567198, 64, 0, 2, 32, 2),
    (567198, 64, 1, 1, 32, 1),
    (567198, 64, 2, 1, 32, 1),
    (567198, 64, 5, 3, 4, 700),   # 8400 draws: crosses several MT19937 twists
    (1000, 8, 42, 2, 3, 4),
]


def main():
    out = []
    for n, ctx, seed, world, batch, steps in CASES:
        n_train = int(0.9 * n)
        g = torch.Generator()
        g.manual_seed(seed)
        draws = [torch.randint(0, n_train - ctx, (world * batch,), generator=g).tolist() for _ in range(steps)]
        case = {"text_bytes": n, "context": ctx, "seed": seed, "world": world, "batch": batch,
                "steps": steps, "n_train": n_train}
        if steps > 10:
            case["last_starts"] = draws[-1]
            case["sum_starts"] = sum(sum(d) for d in draws)
        else:
            case["starts"] = draws
        out.append(case)
    print(json.dumps({"torch": torch.__version__, "cases": out}, indent=1))


if __name__ == "__main__":
    main()
