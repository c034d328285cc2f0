#!/usr/bin/env python3
"""Write the bf16 parity fixtures: PyTorch's ``torch.autocast("cpu", dtype=torch.bfloat16)``
outputs and gradients of models whose fp32/fp64 fixtures already exist.

For each case this loads the weights, input and loss weight ``R`` of the
existing fixture (``crates/vitlab/tests/fixtures/<name>.safetensors``, written by
``tools/make_fixtures.py``), runs the same reference module in float32 under
CPU autocast to bfloat16, with attention through
``F.scaled_dot_product_attention`` as timm's ViT runs it, and writes
``bf16_<name>.safetensors`` with ``output`` and the gradients ``grad.input`` /
``grad.<key>`` of ``loss = sum(output * R)`` (float32; parameters stay float32
master weights, as autocast keeps them). The Rust test
(``crates/vitlab/tests/parity.rs``, LibTorch only) compares vitlab's
``precision = "bf16"`` against these and checks that its error against the
float64 reference is of bf16's size, not fp32's.

    .venv/bin/python tools/make_bf16_fixtures.py [--out DIR]

Needs ``torch``, ``numpy`` and ``safetensors`` (not timm or scipy). Deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

CASES = ("model_vit_cls_linear", "model_vit22b_cls_linear", "model_vit22b-nonorm_cls_linear",
         "model_vit_map_linear", "discriminator_patchgan")


def attend_sdpa(self, qkv):
    """make_fixtures' Attention.attend through PyTorch's fused attention (what timm runs)."""
    B, T, D3 = qkv.shape
    D = D3 // 3
    qkv = qkv.reshape(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if self.q_norm is not None:
        q, k = self.q_norm(q), self.k_norm(k)
    out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
    return out.transpose(1, 2).reshape(B, T, D)


def build(cfg: dict):
    kind = cfg["kind"]
    kw = {k: v for k, v in cfg.items() if k != "kind"}
    if kind == "model":
        return mf.build_model(cfg)
    if kind == "vitunet":
        return mf.ViTUnet(**kw)
    if kind == "discriminator":
        return mf.Discriminator(cfg["discriminator"], cfg["channels"], cfg["width"])
    raise ValueError(kind)


def make(fixtures: str, out: str, name: str) -> str:
    src = load_file(os.path.join(fixtures, name + ".safetensors"))
    with open(os.path.join(fixtures, name + ".safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n))["__metadata__"]
    cfg = json.loads(meta["config"])
    model = build(cfg)
    if meta["weights"] == "det":
        mf.assign_det(model)
    else:
        model.load_state_dict({k[len("param."):]: v for k, v in src.items() if k.startswith("param.")})
    model.train()
    x = src["input"].clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    loss = (y.float() * src["loss_weight"]).sum()
    loss.backward()
    t = {"output": y.detach().float().contiguous(), "grad.input": x.grad.float().contiguous()}
    for k, p in model.named_parameters():
        t["grad." + k] = p.grad.float().contiguous()
    return mf.write(out, "bf16_" + name, t, dict(config=meta["config"], source=name, autocast="cpu bfloat16"))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "crates", "vitlab", "tests", "fixtures")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=default)
    args = ap.parse_args()
    torch.manual_seed(0)
    mf.Attention.attend = attend_sdpa
    for name in CASES:
        print(make(default, args.out, name))


if __name__ == "__main__":
    main()
