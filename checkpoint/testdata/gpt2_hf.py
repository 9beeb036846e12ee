#!/usr/bin/python3
"""Build a GPT-2 with random weights in PyTorch, save it as the safetensors
file Hugging Face transformers writes, and print its logits for the given
token ids as JSON.

    gpt2_hf.py OUT.safetensors VOCAB CTX N_LAYER D N_HEAD SEED B T ID...

With `transformers` importable the model is GPT2LMHeadModel itself, saved
with save_pretrained(safe_serialization=True) when `safetensors` is
importable too (the lm_head tied to wte is then left out, as transformers
does). Without them the model below is a literal re-implementation of
transformers' GPT-2 forward pass in evaluation mode under the same
parameter names and Conv1D layout ([in, out], y = x @ W + b), and the file
is written by hand: an 8-byte little-endian header length, the JSON
header, the raw little-endian float32 data.
"""
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import torch
import torch.nn as nn


def gelu_new(x):
    # transformers' NewGELUActivation ("gelu_new"), GPT-2's activation.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.empty(nf).normal_(std=0.02))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, d, n_head, ctx):
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(3 * d, d)
        self.c_proj = Conv1D(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx))
        self.register_buffer("masked_bias", torch.tensor(-1e4))

    def forward(self, x):
        B, T, d = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(B, T, H, d // H).permute(0, 2, 1, 3) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // H)
        w = torch.where(self.bias[:, :, :T, :T], w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        y = torch.matmul(torch.softmax(w, dim=-1), v)
        return self.c_proj(y.permute(0, 2, 1, 3).reshape(B, T, d))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Conv1D(4 * d, d)
        self.c_proj = Conv1D(d, 4 * d)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d, n_head, ctx):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, n_head, ctx)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, vocab, ctx, n_layer, d, n_head):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList([Block(d, n_head, ctx) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.ln_f(x)


class GPT2LMHead(nn.Module):
    def __init__(self, vocab, ctx, n_layer, d, n_head):
        super().__init__()
        self.transformer = Transformer(vocab, ctx, n_layer, d, n_head)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx):
        return self.lm_head(self.transformer(idx))


def randomize(model):
    # Non-trivial LayerNorm weights and biases too (transformers starts
    # them at 1 and 0), so a misplaced one shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                p.normal_(std=0.1)


def save_by_hand(path, sd):
    header, chunks, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(sd):
        t = sd[name].detach().contiguous()
        if t.dtype == torch.bool:
            raw, dtype = bytes(t.flatten().to(torch.uint8).tolist()), "BOOL"
        else:
            t = t.to(torch.float32).flatten().tolist()
            raw, dtype = struct.pack("<%df" % len(t), *t), "F32"
        header[name] = {"dtype": dtype, "shape": list(sd[name].shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    js = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for c in chunks:
            f.write(c)


def main():
    out = sys.argv[1]
    vocab, ctx, n_layer, d, n_head, seed, B, T = map(int, sys.argv[2:10])
    ids = list(map(int, sys.argv[10:]))
    torch.manual_seed(seed)
    try:
        import transformers
    except ImportError:
        transformers = None
    try:
        import safetensors  # noqa: F401
    except ImportError:
        safetensors = None
    if transformers is not None:
        cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=ctx, n_embd=d, n_layer=n_layer, n_head=n_head,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(cfg)
        impl = "transformers " + transformers.__version__
    else:
        model = GPT2LMHead(vocab, ctx, n_layer, d, n_head)
        impl = "re-implementation"
    randomize(model)
    model.eval()
    if transformers is not None and safetensors is not None:
        tmp = tempfile.mkdtemp()
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.copy(os.path.join(tmp, "model.safetensors"), out)
        shutil.rmtree(tmp)
        impl += " save_pretrained"
    else:
        sd = model.state_dict()
        sd.pop("lm_head.weight", None)  # tied, as save_pretrained leaves it out
        save_by_hand(out, sd)
    with torch.no_grad():
        logits = model(torch.tensor(ids, dtype=torch.int64).view(B, T))
        if not isinstance(logits, torch.Tensor):
            logits = logits.logits
    print(json.dumps({"impl": impl, "logits": logits.flatten().tolist()}))


if __name__ == "__main__":
    main()
