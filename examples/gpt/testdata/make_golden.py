#!/usr/bin/python3
"""Golden for examples/gpt: a small GPT trained by PyTorch (1.13, CPU, 1
thread) with the GPT-mini anchor's code and recipe (gpt_mini.py: data
stream, AdamW, clipping), so that the Go program can be checked step by
step without PyTorch.

Model: gpt_mini.GPT(vocab 256, ctx 16, n_layer 2, d 16, n_head 2),
torch.manual_seed(SEED) before it; its initial weights are written to
tiny_init.bin + tiny_init.bin.json in gpt_bench.py --dump-init's format.
Data: Opticks (gpt_mini.load_data), Batches(data_seed SEED, batch BATCH,
ctx 16). Records the loss of each of STEPS steps and the val loss (all
non-overlapping 16-byte windows of the val split) before and after.

Run from this directory, with the anchors directory (holding gpt_mini.py):
    /usr/bin/python3 make_golden.py ANCHORS_DIR > tiny_golden.json
"""
import json
import sys

import torch

sys.path.insert(0, sys.argv[1])
import gpt_mini as G  # noqa: E402

SEED, BATCH, STEPS, CTX = 3, 8, 20, 16
CFG = dict(vocab=256, ctx=CTX, n_layer=2, d=16, n_head=2)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    model = G.GPT(**CFG)
    man, off = [], 0
    with open("tiny_init.bin", "wb") as f:
        for name, p in model.named_parameters():
            gname = name.replace("emb.wte.weight", "wte").replace("emb.wpe.weight", "wpe") \
                        .replace("head.ln_f", "ln_f")
            a = p.detach().contiguous().float().numpy().astype("<f4")
            f.write(a.tobytes())
            man.append({"name": gname, "shape": list(p.shape), "offset": off})
            off += a.size
    with open("tiny_init.bin.json", "w") as f:
        json.dump({"seed": SEED, "dtype": "float32 little-endian", "numel": off, "tensors": man}, f, indent=0)

    train, val = G.load_data()
    batches = G.Batches(train, data_seed=SEED, batch=BATCH, ctx=CTX)
    params = list(model.parameters())
    opt = G.make_optimizer(params)
    val0 = G.val_loss(model, val, ctx=CTX)
    losses = []
    for _ in range(STEPS):
        x, y = batches.next()
        opt.zero_grad(set_to_none=True)
        loss = G.lm_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, G.CLIP)
        opt.step()
        losses.append(float(loss))
    print(json.dumps({"torch": torch.__version__, "config": CFG, "seed": SEED, "batch": BATCH,
                      "steps": STEPS, "params": off, "val_loss_before": val0,
                      "val_loss_after": G.val_loss(model, val, ctx=CTX), "train_loss": losses}, indent=1))


if __name__ == "__main__":
    main()
