#!/usr/bin/python3
"""bfloat16 checkpoints between PyTorch and cohort.

    bf16_torch.py write DIR
        Builds torch.nn.Sequential(Linear(4, 3), ReLU(), Linear(3, 2)) in
        bfloat16 (seeded, with special values planted), writes its state
        dict as DIR/model.safetensors (safetensors.torch.save_file where
        the module is installed, else the same bytes by hand) and, with
        torch.save, DIR/model.pt; prints {"impl": ..., "bits": {name:
        [uint16, ...]}} as JSON.
    bf16_torch.py read F32.safetensors BF16.safetensors [BF16.pt]
        Loads both safetensors files (safetensors.torch.load_file, else a
        parser of the format's header checked field by field), checks
        that the second is bfloat16 and equals the first rounded by
        PyTorch's .to(torch.bfloat16) bit for bit, and loads it into the
        bf16 module with a strict load_state_dict; with a .pt file, loads
        it with torch.load and checks the same. Prints {"impl": ...,
        "checked": n} as JSON, or fails.
"""
import json
import os
import struct
import sys

import torch
import torch.nn as nn

try:
    import safetensors.torch as st
except ImportError:
    st = None

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16}
NAMES = {v: k for k, v in DTYPES.items()}


def model():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).to(torch.bfloat16)


def save_by_hand(sd, path):
    header, data, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k in sorted(sd):
        t = sd[k].contiguous()
        b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[k] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        data.append(b)
        off += len(b)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js + b"".join(data))


def load_by_hand(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0, f"{path}: header not padded to 8 bytes"
    header = json.loads(raw[8 : 8 + n])
    buf = raw[8 + n :]
    out, end = {}, 0
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert set(v) == {"dtype", "shape", "data_offsets"}, v
        dt = DTYPES[v["dtype"]]
        b, e = v["data_offsets"]
        numel = 1
        for d in v["shape"]:
            numel *= d
        assert e - b == numel * torch.tensor([], dtype=dt).element_size(), (k, v)
        end = max(end, e)
        if dt == torch.bfloat16:
            t = torch.frombuffer(bytearray(buf[b:e]), dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(bytearray(buf[b:e]), dtype=dt)
        out[k] = t.reshape(v["shape"])
    assert end == len(buf), f"{path}: {len(buf)}-byte buffer, tensors end at {end}"
    return out


def load(path):
    return st.load_file(path) if st else load_by_hand(path)


def same_bits(a, b):
    a, b = a.view(torch.int16), b.view(torch.int16)
    nan = torch.isnan(a.view(torch.bfloat16).float()) & torch.isnan(b.view(torch.bfloat16).float())
    return bool(((a == b) | nan).all())


def main():
    impl = "safetensors " + __import__("safetensors").__version__ if st else "by hand"
    if sys.argv[1] == "write":
        m = model()
        with torch.no_grad():
            b = m[0].bias
            b[0], b[1], b[2] = float("inf"), -0.0, 2.0**-130  # a bf16 subnormal
        sd = m.state_dict()
        path = os.path.join(sys.argv[2], "model.safetensors")
        if st:
            st.save_file(sd, path, metadata={"format": "pt"})
        else:
            save_by_hand(sd, path)
        torch.save(sd, os.path.join(sys.argv[2], "model.pt"))
        bits = {k: [x & 0xFFFF for x in v.contiguous().view(torch.int16).flatten().tolist()] for k, v in sd.items()}
        print(json.dumps({"impl": impl, "bits": bits}))
        return
    f32, b16 = load(sys.argv[2]), load(sys.argv[3])
    assert f32.keys() == b16.keys(), (f32.keys(), b16.keys())
    n = 0
    for k in f32:
        assert f32[k].dtype == torch.float32, (k, f32[k].dtype)
        assert b16[k].dtype == torch.bfloat16, (k, b16[k].dtype)
        want = f32[k].to(torch.bfloat16)
        assert same_bits(b16[k], want), (k, b16[k].view(torch.int16), want.view(torch.int16))
        n += f32[k].numel()
    m = model()
    m.load_state_dict(b16, strict=True)
    if len(sys.argv) > 4:
        pt = torch.load(sys.argv[4])
        assert pt.keys() == b16.keys(), (pt.keys(), b16.keys())
        for k in pt:
            assert pt[k].dtype == torch.bfloat16 and same_bits(pt[k], b16[k]), k
        m.load_state_dict(pt, strict=True)
        impl += " + torch.load"
    print(json.dumps({"impl": impl, "checked": n}))


main()
