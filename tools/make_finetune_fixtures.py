#!/usr/bin/env python3
"""Golden fixtures for fine-tuning (`init.from`): position embeddings resampled
to another patch grid by timm's own ``resample_abs_pos_embed`` (bicubic,
``antialias=True``: PyTorch's separable anti-aliased bicubic, PIL's kernel with
a = -0.5, weights renormalised at the borders), with and without a class token,
up and down.

Writes ``crates/vitlab/tests/fixtures/finetune_pos_embed.safetensors`` with, per
case NAME, ``NAME.input`` ``[1, prefix + old*old, D]`` and ``NAME.output``
``[1, prefix + new*new, D]``; the metadata ``cases`` lists
``[name, old, new, prefix]``.

Run from the repository root (needs torch, timm, safetensors):

    .venv/bin/python tools/make_finetune_fixtures.py [--out DIR]

The output is deterministic (seeded) and committed; CI does not need torch.
"""

from __future__ import annotations

import json
import os

import sys

import torch
from timm.layers import resample_abs_pos_embed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the deterministic safetensors writer)

CASES = [
    # name, old grid, new grid, prefix tokens (class token)
    ("up_4_8_cls", 4, 8, 1),
    ("down_8_4_cls", 8, 4, 1),
    ("up_4_6_gap", 4, 6, 0),
    ("down_7_3_cls", 7, 3, 1),
]
DIM = 6


def main():
    out = mf.fixtures_out_dir(__doc__)
    torch.manual_seed(20)
    tensors = {}
    for name, old, new, prefix in CASES:
        x = torch.randn(1, prefix + old * old, DIM)
        y = resample_abs_pos_embed(x, new_size=[new, new], old_size=[old, old], num_prefix_tokens=prefix,
                                   interpolation="bicubic", antialias=True)
        assert y.shape == (1, prefix + new * new, DIM), y.shape
        tensors[f"{name}.input"] = x.contiguous()
        tensors[f"{name}.output"] = y.contiguous()
    meta = {"cases": json.dumps([list(c) for c in CASES])}
    path = mf.write(out, "finetune_pos_embed", tensors, meta)
    print(f"{os.path.getsize(path):>10,d}  {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
