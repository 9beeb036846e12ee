#!/usr/bin/python3
"""Load a safetensors file of models.GPT (written with GPTNames) into the
anchor GPT-mini module with a strict load_state_dict, and print its logits
for the given token ids as JSON.

    gpt_load.py WEIGHTS.safetensors VOCAB CTX N_LAYER D N_HEAD B T ID...

The model classes are those of ../shared/anchors/gpt_mini.py (copied,
trimmed to what the forward pass needs); the file is read with
struct + json + torch.frombuffer, since the `safetensors` package may be
absent.
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, n_head, ctx):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(d, 3 * d)
        self.attn.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.fc = nn.Linear(d, 4 * d)
        self.mlp.proj = nn.Linear(4 * d, d)
        self.mask = torch.triu(torch.ones(ctx, ctx, dtype=torch.bool), 1)

    def forward(self, x):
        B, T, d = x.shape
        H = self.n_head
        hd = d // H
        q, k, v = self.attn.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, H, hd).transpose(1, 2)
        v = v.view(B, T, H, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, d)
        x = x + self.attn.proj(y)
        x = x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln2(x)), approximate="tanh"))
        return x


class Embed(nn.Module):
    def __init__(self, vocab, ctx, d):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)

    def forward(self, idx):
        T = idx.shape[1]
        return self.wte(idx) + self.wpe.weight[:T]


class Head(nn.Module):
    def __init__(self, d, wte):
        super().__init__()
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.wte = [wte]

    def forward(self, x):
        return F.linear(self.ln_f(x), self.wte[0].weight)


class GPT(nn.Module):
    def __init__(self, vocab, ctx, n_layer, d, n_head):
        super().__init__()
        self.emb = Embed(vocab, ctx, d)
        self.h = nn.ModuleList([Block(d, n_head, ctx) for _ in range(n_layer)])
        self.head = Head(d, self.emb.wte)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.h:
            x = b(x)
        return self.head(x)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = bytearray(raw[8 + n:])
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        t = torch.frombuffer(data, dtype=torch.float32, count=(e - b) // 4, offset=b) if e > b else torch.empty(0)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def main():
    path = sys.argv[1]
    vocab, ctx, n_layer, d, n_head, B, T = map(int, sys.argv[2:9])
    ids = list(map(int, sys.argv[9:]))
    model = GPT(vocab, ctx, n_layer, d, n_head)
    model.load_state_dict(load_safetensors(path))  # strict: nothing renamed, nothing missing
    with torch.no_grad():
        logits = model(torch.tensor(ids, dtype=torch.int64).view(B, T))
    print(json.dumps({"keys": list(model.state_dict().keys()), "logits": logits.flatten().tolist()}))


if __name__ == "__main__":
    main()
