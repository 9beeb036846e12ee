"""The case format shared by make_goldens.py and make_transformer_goldens.py.

start(argv) reads OUTDIR SEED, creates OUTDIR and seeds the one generator that rnd (and the
caller, for integer inputs) draws from; case() runs fn under the backward convention
loss = sum(out * dout) and returns {"name", "op", "attrs", "inputs", "outputs", "grads"}.
"""
import os
import torch

g = None

def start(argv):
    """argv = [prog, OUTDIR, SEED] -> (out_dir, seed, generator)."""
    global g
    out_dir, seed = argv[1], int(argv[2])
    os.makedirs(out_dir, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    return out_dir, seed, g

def rnd(*shape, scale=1.0):
    return (torch.randn(tuple(shape), generator=g) * scale).float().double()

def T(t):
    t = t.detach()
    if t.dtype in (torch.int64, torch.int32):
        return {"shape": list(t.shape), "data": [int(v) for v in t.reshape(-1).tolist()]}
    return {"shape": list(t.shape), "data": [float(v) for v in t.double().reshape(-1).tolist()]}

def case(name, op, attrs, fn, inputs, int_inputs=None):
    """fn(**inputs, **int_inputs) -> output tensor (or dict of outputs). Grad inputs are float ones."""
    int_inputs = int_inputs or {}
    leaf = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    out = fn(**leaf, **int_inputs)
    outs = out if isinstance(out, dict) else {"out": out}
    douts = {}
    loss = 0
    for k, o in outs.items():
        d = rnd(*o.shape)
        douts["d" + k if k != "out" else "dout"] = d
        loss = loss + (o * d).sum()
    loss.backward()
    res = {"name": name, "op": op, "attrs": attrs,
           "inputs": {**{k: T(v) for k, v in inputs.items()}, **{k: T(v) for k, v in int_inputs.items()}, **{k: T(v) for k, v in douts.items()}},
           "outputs": {k: T(v) for k, v in outs.items()},
           "grads": {k: T(v.grad) for k, v in leaf.items() if v.grad is not None}}
    return res
