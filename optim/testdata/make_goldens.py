"""Reference trajectories for the optim tests, computed with PyTorch 1.13 in float64.

Run: python3 make_goldens.py > goldens.json

Covers what the shared golden files do not: SGD dampening and maximize, Adam(W)
with AMSGrad and maximize, beta1 = 0, two parameter groups with their own lr and
weight decay and a parameter that has no gradient in some steps, clipping with
the inf-, 1- and 3-norm and below the threshold, and SequentialLR (warm-up then
cosine) and StepLR chained after LinearLR.
"""
import json
import torch

torch.manual_seed(7)
torch.set_default_dtype(torch.float64)


def rnd(*shape, scale=1.0):
    # float32-representable values
    return (torch.randn(*shape) * scale).float().double()


def T(x):
    return {"shape": list(x.shape), "data": x.detach().flatten().tolist()}


def optimizer_case(name, kind, make, options, groups, steps=4, shapes=((3, 4), (5,)), skip=()):
    """groups: list of (lr, weight_decay, [param indices]); skip: (step, param) pairs without grad."""
    p0 = [rnd(*s) for s in shapes]
    ps = [p.clone().requires_grad_(True) for p in p0]
    opt = make([{"params": [ps[i] for i in idx], "lr": lr, "weight_decay": wd} for lr, wd, idx in groups])
    grads, after = [], []
    for k in range(steps):
        gk = []
        for i, p in enumerate(ps):
            if (k, i) in skip:
                p.grad = None
                gk.append(None)
            else:
                g = rnd(*p.shape)
                p.grad = g.clone()
                gk.append(T(g))
        opt.step()
        grads.append(gk)
        after.append([T(p) for p in ps])
    return {"name": name, "kind": kind, "options": options,
            "groups": [{"lr": lr, "weight_decay": wd, "params": idx} for lr, wd, idx in groups],
            "params": [T(p) for p in p0], "grads": grads, "params_after_each_step": after}


def clip_case(name, max_norm, norm_type, scale):
    gs = [rnd(3, 4, scale=scale), rnd(5, scale=scale)]
    ps = [torch.zeros_like(g, requires_grad=True) for g in gs]
    for p, g in zip(ps, gs):
        p.grad = g.clone()
    tn = torch.nn.utils.clip_grad_norm_(ps, max_norm=max_norm, norm_type=norm_type)
    return {"name": name, "max_norm": max_norm, "norm_type": "inf" if norm_type == float("inf") else norm_type,
            "grads": [T(g) for g in gs], "total_norm": float(tn), "clipped": [T(p.grad) for p in ps]}


def schedule_case(name, make, base_lrs=(0.1, 0.02), steps=30):
    ps = [torch.zeros(1, requires_grad=True) for _ in base_lrs]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(ps, base_lrs)], lr=base_lrs[0])
    sch = make(opt)
    lrs = []
    for _ in range(steps):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sch.step()
    return {"name": name, "base_lrs": list(base_lrs), "lr_per_step": lrs}


two = [(0.05, 0.01, [0]), (0.02, 0.0, [1])]
cases = [
    optimizer_case("sgd_dampening", "sgd", lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9, dampening=0.3),
                   {"momentum": 0.9, "dampening": 0.3}, two),
    optimizer_case("sgd_maximize_nesterov", "sgd",
                   lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.8, nesterov=True, maximize=True),
                   {"momentum": 0.8, "nesterov": True, "maximize": True}, two),
    optimizer_case("sgd_momentum_skipped_grads", "sgd", lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9),
                   {"momentum": 0.9}, two, skip={(0, 1), (2, 0)}),
    optimizer_case("adam_amsgrad_groups", "adam",
                   lambda g: torch.optim.Adam(g, lr=0.01, betas=(0.8, 0.99), eps=1e-6, amsgrad=True),
                   {"beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "amsgrad": True}, [(0.01, 0.1, [0]), (0.03, 0.0, [1])], steps=5),
    optimizer_case("adam_maximize_beta1_zero", "adam",
                   lambda g: torch.optim.Adam(g, lr=0.01, betas=(0.0, 0.9), maximize=True),
                   {"beta1": 0.0, "beta2": 0.9, "eps": 1e-8, "maximize": True}, two),
    optimizer_case("adamw_amsgrad_skipped_grads", "adamw",
                   lambda g: torch.optim.AdamW(g, lr=0.01, betas=(0.9, 0.95), amsgrad=True),
                   {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "amsgrad": True}, [(0.01, 0.1, [0]), (0.005, 0.5, [1])],
                   steps=5, skip={(1, 0), (3, 1)}),
]
clips = [
    clip_case("inf_norm", 1.0, float("inf"), 3),
    clip_case("one_norm", 2.5, 1.0, 1),
    clip_case("three_norm", 0.5, 3.0, 1),
    clip_case("below_max", 100.0, 2.0, 1),
]
L = torch.optim.lr_scheduler
schedules = [
    schedule_case("warmup_cosine", lambda o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.01, end_factor=1.0, total_iters=5), L.CosineAnnealingLR(o, T_max=20, eta_min=1e-4)],
        milestones=[5])),
    schedule_case("linear_step_step", lambda o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.5, total_iters=3), L.StepLR(o, step_size=4, gamma=0.5),
            L.StepLR(o, step_size=2, gamma=0.9)], milestones=[4, 12])),
    schedule_case("cosine_past_tmax", lambda o: L.CosineAnnealingLR(o, T_max=7, eta_min=0.001)),
    schedule_case("linear_decay", lambda o: L.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=10)),
]
print(json.dumps({"generator": "torch " + torch.__version__ + ", make_goldens.py, seed 7",
                  "optimizers": cases, "clips": clips, "schedules": schedules}))
