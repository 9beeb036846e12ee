#!/usr/bin/python3
"""CPU anchor: PyTorch training throughput in float32 and under
torch.autocast("cpu", dtype=torch.bfloat16), one thread, for the bf16
rows of bench/vs_pytorch.sh.

Workloads (the same as the fp32 anchors'):
  mlp  ddp_mlp_bench.py's MNIST MLP (784-1024-1024-10) on 60000 synthetic
       MNIST-shaped samples (seed 1234), batches of 64 in a
       DistributedSampler order of one replica, SGD lr 0.01 momentum 0.9;
       samples/s = 64 * steps / wall.
  gpt  gpt_mini.py's GPT-mini on the bytes of Opticks, batches of 32x64
       tokens, AdamW, clipping at 1.0; tokens/s = 32 * 64 * steps / wall.
Precision: fp32, or bf16 = the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (float32 weights, gradients
and optimizer state; autocast runs the linear layers in bf16 through
oneDNN and keeps the loss in float32), backward and the step outside it.

    autocast_bench.py [--anchors DIR] [--models mlp gpt] [--dtypes fp32 bf16]
                      [--repeats 1] [--steps 100] [--warmup 10]
                      [--gpt-steps 30] [--gpt-warmup 5] [--out FILE]

DIR holds gpt_mini.py (the anchors directory; default $COHORT_ANCHORS,
else ../shared/anchors beside the repository). Each run prints one JSON
line on stdout ({"bench": "autocast", "model", "dtype", "threads": 1,
"steps", "warmup", "wall_s", "step_ms", "samples_per_s", and
"tokens_per_s" for gpt, "last_loss", "onednn_max_cpu_isa"}) and appends
it to --out; the dtypes alternate within each repeat so that load from
other processes hits both alike. To see the ISA oneDNN dispatched to, run
with ONEDNN_VERBOSE=1 and look for the "oneDNN v… cpu,runtime…,isa:" line.
"""
import argparse
import json
import os
import sys
import time

import torch


def anchors_dir(arg):
    d = arg or os.environ.get("COHORT_ANCHORS")
    if not d:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        d = os.path.join(os.path.dirname(repo), "shared", "anchors")
    if not os.path.isfile(os.path.join(d, "gpt_mini.py")):
        sys.exit(f"autocast_bench: {d}/gpt_mini.py not found (pass --anchors DIR or set COHORT_ANCHORS)")
    return d


def ctx(dtype):
    if dtype == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def mlp_run(dtype, steps, warmup):
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    n, batch = 60000, 64
    g = torch.Generator()
    g.manual_seed(1234)
    X = torch.randn(n, 784, generator=g)
    Y = torch.randint(0, 10, (n,), generator=g)
    ds = TensorDataset(X, Y)
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0, drop_last=False)
    loader = DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=0, drop_last=True)
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            yield from loader
            epoch += 1

    it = batches()

    def step():
        xb, yb = next(it)
        opt.zero_grad()
        with ctx(dtype):
            loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    return timed(step, steps, warmup), {"samples": batch}


def gpt_run(G, dtype, steps, warmup):
    train, _ = G.load_data()
    batches = G.Batches(train, data_seed=0)
    torch.manual_seed(0)
    model = G.GPT()
    params = list(model.parameters())
    opt = G.make_optimizer(params)

    def step():
        x, y = batches.next()
        opt.zero_grad(set_to_none=True)
        with ctx(dtype):
            loss = G.lm_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, G.CLIP)
        opt.step()
        return loss

    return timed(step, steps, warmup), {"samples": G.BATCH, "tokens": G.BATCH * G.CTX}


def timed(step, steps, warmup):
    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    return time.perf_counter() - t0, float(loss)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anchors")
    p.add_argument("--models", nargs="+", default=["mlp", "gpt"], choices=["mlp", "gpt"])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--gpt-steps", type=int, default=30)
    p.add_argument("--gpt-warmup", type=int, default=5)
    p.add_argument("--out")
    a = p.parse_args()
    torch.set_num_threads(1)
    G = None
    if "gpt" in a.models:
        sys.path.insert(0, anchors_dir(a.anchors))
        import gpt_mini as G
    for r in range(a.repeats):
        for model in a.models:
            for dtype in a.dtypes:
                if model == "gpt":
                    steps, warmup = a.gpt_steps, a.gpt_warmup
                    (wall, loss), per = gpt_run(G, dtype, steps, warmup)
                else:
                    steps, warmup = a.steps, a.warmup
                    (wall, loss), per = mlp_run(dtype, steps, warmup)
                rec = {"bench": "autocast", "model": model, "dtype": dtype, "threads": torch.get_num_threads(),
                       "round": r + 1, "steps": steps, "warmup": warmup, "wall_s": wall,
                       "step_ms": wall / steps * 1e3, "samples_per_s": per["samples"] * steps / wall,
                       "last_loss": loss, "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "default")}
                if "tokens" in per:
                    rec["tokens_per_s"] = per["tokens"] * steps / wall
                line = json.dumps(rec)
                print(line, flush=True)
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(line + "\n")


if __name__ == "__main__":
    main()
