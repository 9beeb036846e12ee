#!/usr/bin/python3
"""Load the weights `mnist -save FILE` wrote into PyTorch's nn.Sequential of
the anchor ddp_mlp_bench.py and print its MNIST test accuracy.

    torch_eval.py MODEL WEIGHTS.safetensors MNIST_DIR

The safetensors file is read with a few lines of struct + json +
torch.frombuffer (the `safetensors` package may be absent), and
load_state_dict is strict: every key must match with nothing renamed.
Inputs are standardised as the Go example does, (x·(1/255) - 0.1307)/0.3081
in float32; accuracy is printed to 4 decimals, as cohort prints it.
"""
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = bytearray(raw[8 + n:])
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        size = torch.empty((), dtype=dt).element_size()
        t = torch.frombuffer(data, dtype=dt, count=(e - b) // size, offset=b) if e > b else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def build_model(name):
    # As in ../shared/anchors/ddp_mlp_bench.py.
    if name == "mlp":
        return nn.Sequential(
            nn.Linear(784, 1024), nn.ReLU(),
            nn.Linear(1024, 1024), nn.ReLU(),
            nn.Linear(1024, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    raise ValueError(name)


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(d, name):
    for p in (os.path.join(d, name + ".gz"), os.path.join(d, name)):
        if os.path.exists(p):
            return p
    raise FileNotFoundError(os.path.join(d, name))


def main():
    model_name, weights, mnist_dir = sys.argv[1:4]
    model = build_model(model_name)
    model.load_state_dict(load_safetensors(weights))  # strict
    model.eval()
    images = read_idx(find(mnist_dir, "t10k-images-idx3-ubyte")).astype(np.float32) * np.float32(1.0 / 255)
    labels = torch.from_numpy(read_idx(find(mnist_dir, "t10k-labels-idx1-ubyte")).astype(np.int64))
    x = (images - np.float32(0.1307)) / np.float32(0.3081)
    x = torch.from_numpy(x.reshape(len(x), -1) if model_name == "mlp" else x.reshape(len(x), 1, 28, 28))
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            correct += int((model(x[i:i + 1000]).argmax(1) == labels[i:i + 1000]).sum())
    print(f"torch test accuracy: {correct / len(x):.4f}")


if __name__ == "__main__":
    main()
