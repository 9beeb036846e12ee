"""Writes half.json: float32 inputs (as bit patterns) with PyTorch's
float16 and bfloat16 roundings (as bit patterns). Run with PyTorch:
    python3 make_half.py > half.json
"""
import json
import struct

import torch

g = torch.Generator()
g.manual_seed(7)
vals = []
for scale in [1e-9, 1e-7, 3e-6, 6e-5, 1e-3, 1.0, 300.0, 6e4, 7e4, 1e6]:
    vals += (torch.randn(40, generator=g) * scale).tolist()
bits = [struct.unpack("<I", struct.pack("<f", v))[0] for v in torch.tensor(vals, dtype=torch.float32).tolist()]
# Hand-picked edges: zeros, ties at both precisions, range limits,
# subnormals, infinities, NaN.
special = [0x00000000, 0x80000000, 0x3f800000, 0x3f801000, 0x3f803000, 0x3f802000,
           0x3f808000, 0x3f818000, 0x3f80c000, 0x477fe000, 0x477ff000, 0x477fefff,
           0x47800000, 0x33800000, 0x33000000, 0x33000001, 0x337fffff, 0x387fc000,
           0x387fe000, 0x38800000, 0x38000000, 0x00000001, 0x007fffff, 0x7f7fffff,
           0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x3effffff, 0x477fffff]
bits += special
x = torch.tensor([struct.unpack("<f", struct.pack("<I", b))[0] for b in bits], dtype=torch.float32)
fp16 = x.half().view(torch.int16).tolist()
bf16 = x.bfloat16().view(torch.int16).tolist()
cases = []
for b, h, bh in zip(bits, fp16, bf16):
    cases.append([b, h & 0xFFFF, bh & 0xFFFF])
print(json.dumps({"generator": "torch " + torch.__version__, "columns": ["f32", "fp16", "bf16"], "cases": cases}, separators=(",", ":")))
